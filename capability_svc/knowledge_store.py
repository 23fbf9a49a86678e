"""Knowledge stores: markdown documents with wikilinks, one store per scope, retrieved by BM25 and link expansion.

A store is one directory named after its scope (PRD §31), under the knowledge
root (``capability_svc/knowledge/`` by default, ``knowledge_dir`` in the
config)::

    compliance.nr/
      scope.yaml     scope: compliance.nr       # must equal the directory name
                     title: ...
                     authority: UNVERIFIED_DOCUMENT   # of every passage, see provenance
                     description: ...
      NR-10.md       one document per file; the file stem is the document id
      NR-35.md

A document (the format is in ``capability_svc/KNOWLEDGE_FORMAT.md``)::

    ---                               optional front matter: string fields
    edition: Portaria MTE nº 598/2004    (``id``, if given, must be the stem)
    ---
    # NR-10 — Safety in electrical installations     the title (exactly one H1)
    Text before the first clause: the document's own passage (id ``NR-10``).
    ## 10.5.1 Work on de-energised installations     a clause: its first word is its id
    Clause text, linking [[NR-10#10.2.8]], [[#10.6.1]] (same document), [[NR-35]] (a document),
    [[NR-35#35.5.2|fall protection]] (with a label).

The unit of retrieval is a **passage**: a document's own text, or one clause
(``## `` section, ``###`` sub-headings included). Every wikilink must resolve
to a document or clause of the same store, else the store does not load.

**Retrieval** (:meth:`KnowledgeStore.search`): BM25 (k1 1.2, b 0.75) over
the passages, whose indexed text is the document id, the clause id and title
(counted twice) and the body with each wikilink as its label only; then wikilink expansion: the passages the hits
link to (depth 1 by default, up to 2), each scored half its linking hit's
score and marked ``via`` that hit, at most ``limit`` of them. Tokens: NFKD
without accents, lower case, words and dotted numbers (``10.5.1`` is one
token; ``nr-10`` is itself, ``nr`` and ``10``), English and Portuguese stop
words dropped, a plural ``s`` folded. Each passage's BM25 weight per term is
computed once when the store loads, so a query only adds up the postings of
its terms, and of its common terms only those of passages that can still make
the answer (exact MaxScore pruning, :meth:`KnowledgeStore._top`). Results are
deterministic: ties go to the earlier passage.

**Versions**: a document's version is ``sha256:`` of its file's bytes; the
store's (the *knowledge version* a task records) is ``sha256:`` over every
file of the directory, each path and content length-prefixed, in path order.
Any edit, rename, addition or removal changes it.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import math
import re
import unicodedata
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Final

import yaml

from capability_svc.errors import CapabilityNotFound, ResourceNotFound
from capability_svc.invocation import Execution, InvocationContext
from capability_svc.provenance import Authority, Provenance

__all__ = [
    "KNOWLEDGE_CAPABILITIES",
    "Hit",
    "KnowledgeBackend",
    "KnowledgeError",
    "KnowledgeLibrary",
    "KnowledgeStore",
    "Passage",
    "default_knowledge_dir",
    "tokens",
]

K1: Final = 1.2
B: Final = 0.75
EXPANSION_DECAY: Final = 0.5
"""A passage reached through a wikilink scores this fraction of the hit that links to it."""
MAX_PASSAGE_CHARS: Final = 4000
"""A clause longer than this does not load: retrieval hands out clauses, not chapters."""
MAX_FILE_BYTES: Final = 1_000_000
SCOPE_FILE: Final = "scope.yaml"
_RELEASE_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_CLAUSE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")
_SCOPE_RE = re.compile(r"^[a-z][a-z0-9]*([._-][a-z0-9]+)*$")
_WIKILINK_RE = re.compile(r"\[\[([^\[\]|\n]*)(?:\|([^\[\]\n]*))?\]\]")
_WORD_RE = re.compile(r"[0-9a-z]+(?:[./-][0-9a-z]+)*")
_NUMBERISH_RE = re.compile(r"^[0-9]+(\.[0-9a-z]+)+$")
_COMBINING_RE = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
"""Combining marks, dropped after NFKD: "ação" and "acao" are one term."""
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it (front matter of 10,000 documents: seconds otherwise)."""

# Words that carry no meaning for retrieval, English and Portuguese (the norms' own language).
_STOP_WORDS: Final = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "for", "from", "has", "have", "if", "in",
    "into", "is", "it", "its", "may", "must", "no", "not", "of", "on", "or", "shall", "should", "such", "that",
    "the", "their", "them", "then", "there", "these", "this", "those", "to", "was", "were", "when", "where", "which",
    "while", "who", "will", "with", "within", "without", "any", "each", "every", "other", "than", "only", "also",
    "all", "before", "after", "over", "under", "per", "via", "o", "os", "um", "uma", "uns", "umas", "e", "ou",
    "de", "do", "dos", "da", "das", "em", "nos", "na", "nas", "por", "pelo", "pela", "pelos", "pelas", "para",
    "com", "sem", "ao", "aos", "se", "que", "ser", "deve", "devem", "sao", "sua", "seu", "suas", "seus", "este",
    "esta", "estes", "estas", "isso"
})


class KnowledgeError(Exception):
    """A knowledge store cannot be loaded; the message names the file and line."""

    def __init__(self, message: str, *, file: str = "", line: int = 0) -> None:
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        super().__init__(f"{where}{message}")
        self.file = file
        self.line = line


def default_knowledge_dir() -> Path:
    """The knowledge stores shipped with the capability service."""
    return Path(str(resources.files("capability_svc"))) / "knowledge"


def _fold(word: str) -> str:
    # A light plural fold, the same for both languages: "workers" and "worker" meet.
    if len(word) > 4 and word.endswith("s") and not word.endswith("ss") and not word[-2].isdigit():
        return word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """The index terms of ``text`` (see the module docstring), in order, repeats kept."""
    plain = text.lower()
    if not plain.isascii():
        plain = _COMBINING_RE.sub("", unicodedata.normalize("NFKD", plain))
    out: list[str] = []
    for match in _WORD_RE.finditer(plain):
        word = match.group()
        if "-" in word or "/" in word:
            parts = [p for p in re.split(r"[-/]", word) if p]
            out.append(word)
            out.extend(_fold(p) for p in parts if p not in _STOP_WORDS and (len(p) > 1 or p.isdigit()))
        elif word not in _STOP_WORDS and (len(word) > 1 or word.isdigit()):
            out.append(word if _NUMBERISH_RE.match(word) else _fold(word))
    return out


@dataclass(frozen=True)
class Passage:
    """One unit of retrieval: a document's own text or one of its clauses."""

    passage_id: str
    """``NR-10`` (the document's own passage) or ``NR-10#10.5.1`` (a clause)."""
    document_id: str
    clause_id: str
    """``10.5.1``; empty for the document's own passage."""
    title: str
    text: str
    """Plain text: each wikilink written as its label, else as ``NR-10 10.5.1``."""
    links: tuple[str, ...]
    """Passage ids this passage links to, in order, without repeats or itself."""
    line: int
    """Line of its heading in the file (1-based)."""


@dataclass(frozen=True)
class Document:
    """One markdown file of a store."""

    document_id: str
    title: str
    version: str
    """``sha256:`` of the file's bytes."""
    path: str
    """Relative to the store directory."""
    meta: Mapping[str, str]
    """The front matter (``edition``, ``source``, ...)."""
    passages: tuple[str, ...]


@dataclass(frozen=True)
class Hit:
    """One passage a search returned."""

    passage: Passage
    document: Document
    score: float
    rank: int
    """1-based position in the answer."""
    via: str | None = None
    """For a passage reached through a wikilink: the passage id of the hit linking to it."""


@dataclass
class _Parsed:
    document_id: str
    title: str
    meta: dict[str, str]
    sections: list[tuple[str, str, int, list[tuple[int, str]]]] = field(default_factory=list)
    """(clause id, title, heading line, body lines with their numbers)."""


def _front_matter(lines: list[str], file: str) -> tuple[dict[str, str], int]:
    """The front matter's fields and the index of the first line after it."""
    if not lines or lines[0].strip() != "---":
        return {}, 0
    for end in range(1, len(lines)):
        if lines[end].strip() == "---":
            try:
                data: Any = yaml.load("\n".join(lines[1:end]), Loader=_YAML_LOADER) or {}
            except yaml.YAMLError as err:
                raise KnowledgeError(f"front matter is not valid YAML: {err}", file=file, line=1) from err
            if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str | int | float)
                                                     for k, v in data.items()):
                raise KnowledgeError("front matter must map names to plain strings", file=file, line=1)
            return {k: str(v) for k, v in data.items()}, end + 1
    raise KnowledgeError("front matter is not closed by a '---' line", file=file, line=1)


def _parse(document_id: str, text: str, file: str) -> _Parsed:
    lines = text.splitlines()
    meta, start = _front_matter(lines, file)
    if meta.get("id", document_id) != document_id:
        raise KnowledgeError(f"front matter id {meta['id']!r} is not the file's name {document_id!r}", file=file,
                             line=1)
    parsed: _Parsed | None = None
    fence = False
    for number, line in enumerate(lines[start:], start + 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        heading = None if fence else re.match(r"^(#{1,2})\s+(.*?)\s*#*\s*$", line)
        if heading and len(heading.group(1)) == 1:
            if parsed is not None:
                raise KnowledgeError("a document has exactly one '# ' title", file=file, line=number)
            parsed = _Parsed(document_id, heading.group(2), meta, [("", heading.group(2), number, [])])
            continue
        if parsed is None:
            if line.strip():
                raise KnowledgeError("text before the document's '# ' title", file=file, line=number)
            continue
        if heading:
            words = heading.group(2).split(None, 1)
            clause = words[0] if words else ""
            if not _CLAUSE_RE.match(clause):
                raise KnowledgeError(f"a clause heading starts with the clause id ({_CLAUSE_RE.pattern}), "
                                     f"got {heading.group(2)!r}", file=file, line=number)
            if any(s[0] == clause for s in parsed.sections):
                raise KnowledgeError(f"clause {clause!r} appears twice", file=file, line=number)
            parsed.sections.append((clause, words[1] if len(words) > 1 else clause, number, []))
            continue
        parsed.sections[-1][3].append((number, line))
    if parsed is None:
        raise KnowledgeError("no '# ' title", file=file, line=1)
    return parsed


@dataclass(frozen=True)
class _LinkContext:
    document_id: str
    own: str
    file: str
    line: int
    document_ids: set[str]
    clauses: set[tuple[str, str]]
    links: list[str]
    """Collects the passage ids linked to, in order, without repeats or the passage itself."""


def _render_links(line: str, at: _LinkContext) -> tuple[str, str]:
    """``line`` with each wikilink written as its label, else ``DOC CLAUSE`` (to show), and as its label only
    (to index); each target resolved into ``at.links``.

    Raises:
        KnowledgeError: a wikilink names no document or clause of the store.
    """
    def target(match: re.Match[str]) -> str:
        target = match.group(1).strip()
        target_doc, _, target_clause = target.partition("#")
        target_doc = target_doc.strip() or at.document_id
        target_clause = target_clause.strip()
        if target_doc not in at.document_ids:
            raise KnowledgeError(f"wikilink [[{target}]] names no document of this store", file=at.file,
                                 line=at.line)
        if target_clause and (target_doc, target_clause) not in at.clauses:
            raise KnowledgeError(f"wikilink [[{target}]] names no clause of {target_doc}", file=at.file,
                                 line=at.line)
        pid = f"{target_doc}#{target_clause}" if target_clause else target_doc
        if pid != at.own and pid not in at.links:
            at.links.append(pid)
        return f"{target_doc} {target_clause}" if target_clause else target_doc

    def show(match: re.Match[str]) -> str:
        resolved = target(match)
        return (match.group(2) or "").strip() or resolved

    return _WIKILINK_RE.sub(show, line), _WIKILINK_RE.sub(lambda m: (m.group(2) or "").strip(), line)


def _digest(parts: Iterable[tuple[str, bytes]]) -> str:
    sha = hashlib.sha256()
    for name, content in parts:
        for chunk in (name.encode(), content):
            sha.update(len(chunk).to_bytes(8, "big"))
            sha.update(chunk)
    return "sha256:" + sha.hexdigest()


class KnowledgeStore:
    """The documents of one scope, indexed for BM25; immutable once loaded, safe to share between threads."""

    def __init__(self, scope: str, *, title: str, authority: Authority, description: str, version: str,
                 documents: Sequence[Document], passages: Sequence[Passage], indexed: Sequence[str],
                 release: str = "") -> None:
        """Use :meth:`load` or :meth:`from_files` (``indexed``: what BM25 indexes of each passage's body, the
        text with each wikilink as its label only — so a passage linking to a clause does not match that
        clause's id as if it were the clause)."""
        self.scope = scope
        self.title = title
        self.authority = authority
        self.description = description
        self.version = version
        self.release = release
        """The release its editors gave it (semver; "" when it declares none); ``version`` is its content."""
        self._documents = {d.document_id: d for d in documents}
        self._passages = list(passages)
        self._by_id = {p.passage_id: i for i, p in enumerate(self._passages)}
        self._links = [tuple(self._by_id[t] for t in p.links) for p in self._passages]
        self._index(indexed)

    # -- loading ---------------------------------------------------------------------------------

    @classmethod
    def load(cls, directory: Path) -> KnowledgeStore:
        """The store in ``directory`` (see the module docstring).

        Raises:
            KnowledgeError: naming the file and line of the first problem.
        """
        if not directory.is_dir():
            raise KnowledgeError("not a directory", file=str(directory))
        files: dict[str, bytes] = {}
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            rel = path.relative_to(directory).as_posix()
            if any(part.startswith(".") for part in Path(rel).parts):
                continue  # editor and VCS files are not knowledge
            if path.stat().st_size > MAX_FILE_BYTES:
                raise KnowledgeError(f"larger than {MAX_FILE_BYTES} bytes", file=str(path))
            files[rel] = path.read_bytes()
        return cls.from_files(directory.name, files, origin=str(directory))

    @classmethod
    def from_files(cls, scope: str, files: Mapping[str, bytes], *, origin: str = "") -> KnowledgeStore:
        """A store from its files' contents: ``scope.yaml`` and ``<document id>.md`` by relative path.

        Raises:
            KnowledgeError: naming the file and line of the first problem.
        """
        def where(rel: str) -> str:
            return f"{origin}/{rel}" if origin else rel

        if not _SCOPE_RE.match(scope) or len(scope) > 64:
            raise KnowledgeError(f"scope {scope!r} is not a scope id ({_SCOPE_RE.pattern})", file=origin)
        if SCOPE_FILE not in files:
            raise KnowledgeError(f"no {SCOPE_FILE}", file=origin)
        meta = cls._scope_meta(scope, files[SCOPE_FILE], where(SCOPE_FILE))
        version = _digest(sorted(files.items()))
        documents: list[Document] = []
        parsed: list[_Parsed] = []
        for rel, content in sorted(files.items()):
            if rel == SCOPE_FILE:
                continue
            if not rel.endswith(".md") or "/" in rel:
                raise KnowledgeError("a store holds scope.yaml and <document id>.md files only", file=where(rel))
            document_id = rel[:-3]
            if not _ID_RE.match(document_id):
                raise KnowledgeError(f"document id {document_id!r} must match {_ID_RE.pattern}", file=where(rel))
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError as err:
                raise KnowledgeError(f"not UTF-8: {err}", file=where(rel)) from err
            doc = _parse(document_id, text, where(rel))
            parsed.append(doc)
            documents.append(Document(
                document_id, doc.title, "sha256:" + hashlib.sha256(content).hexdigest(), rel, dict(doc.meta),
                tuple(f"{document_id}#{s[0]}" if s[0] else document_id for s in doc.sections)))
        if not documents:
            raise KnowledgeError("a store holds at least one document", file=origin)
        passages = cls._passages_of(parsed, {d.document_id for d in documents}, where)
        return cls(scope, title=meta["title"], authority=Authority(meta["authority"]),
                   description=meta.get("description", ""), version=version, documents=documents,
                   passages=[p for p, _ in passages], indexed=[text for _, text in passages],
                   release=meta.get("release", ""))

    @staticmethod
    def _scope_meta(scope: str, content: bytes, file: str) -> dict[str, str]:
        try:
            data: Any = yaml.safe_load(content.decode("utf-8"))
        except (UnicodeDecodeError, yaml.YAMLError) as err:
            raise KnowledgeError(f"not valid YAML: {err}", file=file) from err
        if not isinstance(data, dict):
            raise KnowledgeError("expected a mapping", file=file)
        unknown = sorted(set(data) - {"scope", "title", "authority", "description", "release"})
        if unknown:
            raise KnowledgeError(f"unknown field {unknown[0]!r}", file=file)
        if data.get("scope") != scope:
            raise KnowledgeError(f"scope: must be {scope!r}, the directory's name", file=file)
        if not isinstance(data.get("title"), str) or not data["title"].strip():
            raise KnowledgeError("title: a non-empty string is required", file=file)
        if data.get("authority") not in {a.value for a in Authority}:
            raise KnowledgeError(f"authority: one of {', '.join(a.value for a in Authority)} is required", file=file)
        if not isinstance(data.get("description", ""), str):
            raise KnowledgeError("description: must be a string", file=file)
        release = data.get("release", "")
        if release != "" and (not isinstance(release, str) or not _RELEASE_RE.match(release)):
            raise KnowledgeError("release: a semantic version such as 1.2.0 (quoted) is required", file=file)
        return {k: str(v) for k, v in data.items()}

    @staticmethod
    def _passages_of(parsed: Sequence[_Parsed], document_ids: set[str], where: Any) -> list[tuple[Passage, str]]:
        """Every passage, with the text BM25 indexes of it."""
        clauses = {(d.document_id, s[0]) for d in parsed for s in d.sections}
        passages: list[tuple[Passage, str]] = []
        for doc in parsed:
            file = where(f"{doc.document_id}.md")
            for clause, title, heading_line, body in doc.sections:
                own = f"{doc.document_id}#{clause}" if clause else doc.document_id
                links: list[str] = []
                shown: list[str] = []
                indexed: list[str] = []
                for number, line in body:
                    display, labels = _render_links(line, _LinkContext(doc.document_id, own, file, number,
                                                                       document_ids, clauses, links))
                    shown.append(display)
                    indexed.append(labels)
                text = "\n".join(shown).strip()
                if len(text) > MAX_PASSAGE_CHARS:
                    what = f"clause {clause}" if clause else "the text before the first clause"
                    raise KnowledgeError(f"{what} has {len(text)} characters, more than {MAX_PASSAGE_CHARS}: "
                                         "split it into clauses", file=file, line=heading_line)
                passages.append((Passage(own, doc.document_id, clause, title, text, tuple(links), heading_line),
                                 "\n".join(indexed)))
        return passages

    # -- index -----------------------------------------------------------------------------------

    def _index(self, indexed: Sequence[str]) -> None:
        """The postings: term → (passage indexes ascending, BM25 weights), everything of BM25 that does not
        depend on the query, and each term's largest weight (for pruning, see :meth:`_top`).

        Kept in typed arrays (14 bytes a posting while building, 12 after, rather than Python objects per
        posting): 10,000 documents of four clauses are about five million postings. Two passes over the
        postings, none over the text again: the first counts (term frequency per passage, document
        frequency, lengths), the second turns counts into weights once the average length is known.
        """
        ids: dict[str, array[int]] = {}
        tfs: dict[str, array[int]] = {}
        lengths = array("i")
        for i, p in enumerate(self._passages):
            heading = tokens(f"{p.document_id} {p.clause_id} {p.title}")
            body = tokens(indexed[i])
            terms: dict[str, int] = {}
            for term in heading:
                terms[term] = terms.get(term, 0) + 2  # the heading counts twice
            for term in body:
                terms[term] = terms.get(term, 0) + 1
            lengths.append(2 * len(heading) + len(body))
            for term, tf in terms.items():
                if term not in ids:
                    ids[term], tfs[term] = array("i"), array("H")
                ids[term].append(i)
                tfs[term].append(min(tf, 65535))
        n = len(lengths)
        average = (sum(lengths) / n) if n else 0.0
        norms = [K1 * (1 - B + B * length / average) if average else K1 for length in lengths]
        self._postings: dict[str, tuple[array[int], array[float]]] = {}
        self._max: dict[str, float] = {}
        for term, posting in ids.items():
            df = len(posting)
            # BM25's idf, kept positive (the Lucene form) so a very common term still counts a little.
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            weights = array("d", (idf * tf * (K1 + 1) / (tf + norms[i]) for i, tf in zip(posting, tfs[term],
                                                                                           strict=True)))
            self._postings[term] = (posting, weights)
            self._max[term] = max(weights)

    def _top(self, query: str, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` best (passage, BM25 score) pairs, ties to the earlier passage: exactly what scoring
        every passage would give, without reading every posting of the query's common terms.

        MaxScore: the terms are taken by their largest weight, highest first, and their postings added up.
        Once the terms left could not, all together, lift a passage not yet scored above the current
        ``limit``-th score, no new passage can enter the answer: the rest only add to the passages already
        scored that could still reach it — each looked up by bisection in the term's sorted postings when
        they are few, else by reading the postings once.
        """
        terms = sorted((t for t in dict.fromkeys(tokens(query)) if t in self._postings),
                       key=lambda t: (-self._max[t], t))
        left = [0.0] * (len(terms) + 1)  # left[k]: the most terms k.. can add to any passage
        for k in range(len(terms) - 1, -1, -1):
            left[k] = left[k + 1] + self._max[terms[k]]
        scores: dict[int, float] = {}
        k = 0
        while k < len(terms):
            if len(scores) >= limit and left[k] < heapq.nlargest(limit, scores.values())[-1]:
                break
            if scores:
                get = scores.get
                for i, w in zip(*self._postings[terms[k]], strict=True):
                    scores[i] = get(i, 0.0) + w
            else:  # the first term: built at C speed
                scores = dict(zip(*self._postings[terms[k]], strict=True))
            k += 1
        while k < len(terms):
            # Only passages that can still reach the limit-th score matter; it only ever rises.
            threshold = heapq.nlargest(limit, scores.values())[-1]
            scores = {i: sc for i, sc in scores.items() if sc + left[k] >= threshold}
            ids, weights = self._postings[terms[k]]
            if len(scores) * max(1, len(ids).bit_length()) < len(ids):
                for i in sorted(scores):  # few candidates, a long posting list: look each one up
                    at = bisect.bisect_left(ids, i)
                    if at < len(ids) and ids[at] == i:
                        scores[i] += weights[at]
            else:  # many candidates: read the postings, adding only to them
                for i, w in zip(ids, weights, strict=True):
                    if i in scores:
                        scores[i] += w
            k += 1
        return heapq.nlargest(limit, scores.items(), key=lambda item: (item[1], -item[0]))

    # -- reading ---------------------------------------------------------------------------------

    @property
    def documents(self) -> list[Document]:
        """Every document, by id."""
        return [self._documents[k] for k in sorted(self._documents)]

    @property
    def passages(self) -> list[Passage]:
        """Every passage, in file order."""
        return list(self._passages)

    def document(self, document_id: str) -> Document | None:
        """A document by id, or None."""
        return self._documents.get(document_id)

    def passage(self, passage_id: str) -> Passage | None:
        """A passage by id (``NR-10`` or ``NR-10#10.5.1``), or None."""
        i = self._by_id.get(passage_id)
        return None if i is None else self._passages[i]

    def search(self, query: str, *, limit: int = 5, expand: int = 1) -> list[Hit]:
        """The best ``limit`` passages for ``query`` by BM25, then up to ``limit`` more through their wikilinks.

        Args:
            query: Free text; only its terms count (see :func:`tokens`).
            limit: How many BM25 hits, and how many linked passages at most (1-50).
            expand: Wikilink depth: 0 none, 1 the hits' links, 2 also the links of those (0-2).

        Raises:
            ValueError: ``limit`` or ``expand`` out of range.
        """
        if not 1 <= limit <= 50:
            raise ValueError("limit must be between 1 and 50")
        if not 0 <= expand <= 2:
            raise ValueError("expand must be between 0 and 2")
        best = self._top(query, limit)
        ranked: list[tuple[int, float, int | None]] = [(i, s, None) for i, s in best]
        seen = {i for i, _ in best}
        frontier = list(ranked)
        added = 0
        for _ in range(expand):
            nxt: list[tuple[int, float, int | None]] = []
            for i, score, _via in frontier:
                for j in self._links[i]:
                    if j in seen or added >= limit:
                        continue
                    seen.add(j)
                    added += 1
                    nxt.append((j, score * EXPANSION_DECAY, i))
            ranked.extend(nxt)
            frontier = nxt
        hits: list[Hit] = []
        for rank, (i, score, via) in enumerate(ranked, 1):
            p = self._passages[i]
            hits.append(Hit(p, self._documents[p.document_id], round(score, 6), rank,
                            None if via is None else self._passages[via].passage_id))
        return hits


class KnowledgeLibrary:
    """Every store under one root directory, by scope."""

    def __init__(self, stores: Iterable[KnowledgeStore]) -> None:
        self._stores = {s.scope: s for s in stores}

    @classmethod
    def load(cls, root: Path | None = None) -> KnowledgeLibrary:
        """Each sub-directory of ``root`` (the shipped stores by default) is one store.

        Raises:
            KnowledgeError: the root is missing, or a store does not load.
        """
        root = root or default_knowledge_dir()
        if not root.is_dir():
            raise KnowledgeError("knowledge directory does not exist", file=str(root))
        return cls(KnowledgeStore.load(d) for d in sorted(root.iterdir())
                   if d.is_dir() and not d.name.startswith((".", "_")))

    @property
    def scopes(self) -> list[str]:
        """The scope ids, sorted."""
        return sorted(self._stores)

    def get(self, scope: str) -> KnowledgeStore | None:
        """The store of a scope, or None."""
        return self._stores.get(scope)


KNOWLEDGE_CAPABILITIES: Final = frozenset({"knowledge.search"})


class KnowledgeBackend:
    """The ``knowledge`` backend of the capability runtime: ``knowledge.search`` over a :class:`KnowledgeLibrary`.

    Which scope a caller may read is not decided here: the capability service
    has already checked that the grant names ``knowledge:<scope>`` and the
    policy engine that the scope is among the agent's ``knowledgeScopes``.
    """

    def __init__(self, library: KnowledgeLibrary, *, clock: Any) -> None:
        """Args:
        library: The stores.
        clock: Returns the current time, timezone-aware (provenance ``fetched_at``).
        """
        self._library = library
        self._clock = clock

    @property
    def capability_ids(self) -> frozenset[str]:
        """Capabilities this backend implements."""
        return KNOWLEDGE_CAPABILITIES

    @property
    def library(self) -> KnowledgeLibrary:
        """The stores it reads."""
        return self._library

    def version_of(self, scope: str) -> str:
        """``<scope>@<store version>``, or empty for an unknown scope."""
        store = self._library.get(scope)
        return f"{scope}@{store.version}" if store else ""

    def run(self, capability_id: str, ctx: InvocationContext, arguments: Mapping[str, Any]) -> Execution:
        """One schema-valid call.

        Raises:
            CapabilityNotFound: not a knowledge capability.
            ResourceNotFound: no store for the scope.
        """
        if capability_id not in KNOWLEDGE_CAPABILITIES:
            raise CapabilityNotFound(f"no knowledge handler for {capability_id!r}")
        scope = str(arguments["scope"])
        store = self._library.get(scope)
        if store is None:
            raise ResourceNotFound(f"knowledge scope {scope!r} not found", reason="KNOWLEDGE_SCOPE_NOT_FOUND",
                                   field="scope")
        hits = store.search(str(arguments["query"]), limit=int(arguments.get("limit", 5)),
                            expand=int(arguments.get("expand", 1)))
        output = {
            "scope": scope,
            "knowledge_version": store.version,
            "hits": [{
                "passage_id": h.passage.passage_id, "document_id": h.document.document_id,
                "clause_id": h.passage.clause_id, "title": h.passage.title, "text": h.passage.text,
                "document_version": h.document.version, "edition": h.document.meta.get("edition", ""),
                "score": h.score, "rank": h.rank, "via": h.via, "links": list(h.passage.links),
            } for h in hits],
            "provenance": Provenance("knowledge", store.authority, self._clock(),
                                     f"{scope}@{store.version}").to_dict(),
        }
        return Execution(output, knowledge_version=f"{scope}@{store.version}")
