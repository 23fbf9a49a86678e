"""Knowledge stores: parsing, BM25 ranking, wikilink expansion, versions, and the shipped NR store."""

from __future__ import annotations

import hashlib
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from capability_svc.errors import ResourceNotFound
from capability_svc.invocation import InvocationContext
from capability_svc.knowledge_store import (
    EXPANSION_DECAY,
    K1,
    B,
    KnowledgeBackend,
    KnowledgeError,
    KnowledgeLibrary,
    KnowledgeStore,
    default_knowledge_dir,
    tokens,
)
from capability_svc.registry import CapabilityRegistry

from .conftest import DEMO_WORLD, NOW

SCOPE_YAML = b"scope: test.kb\ntitle: Test store\nauthority: UNVERIFIED_DOCUMENT\n"


def store(**docs: str) -> KnowledgeStore:
    files = {"scope.yaml": SCOPE_YAML, **{f"{name}.md": text.encode() for name, text in docs.items()}}
    return KnowledgeStore.from_files("test.kb", files)


def refused(files: dict[str, bytes], scope: str = "test.kb") -> str:
    with pytest.raises(KnowledgeError) as info:
        KnowledgeStore.from_files(scope, {"scope.yaml": SCOPE_YAML, **files})
    return str(info.value)


# --- tokens ---------------------------------------------------------------------------------------

def test_tokens_fold_accents_case_and_plurals_and_keep_clause_numbers_whole() -> None:
    assert tokens("Desenergização das instalações") == ["desenergizacao", "instalacoe"]
    assert tokens("NR-10 item 10.5.1") == ["nr-10", "nr", "10", "item", "10.5.1"]
    assert tokens("Workers and the anchorages") == ["worker", "anchorage"]
    assert tokens("de-energised circuits") == ["de-energised", "energised", "circuit"]
    assert tokens("a of the e de para") == []
    assert tokens("glass 35.3.3s") == ["glass", "35.3.3s"]


# --- BM25 -----------------------------------------------------------------------------------------

def test_the_rarer_term_outranks_the_common_one() -> None:
    s = store(D1="# D1\n## 1 One\nharness harness inspection\n## 2 Two\ninspection report\n## 3 Three\ninspection")
    hits = s.search("harness inspection", expand=0)
    assert [h.passage.passage_id for h in hits][0] == "D1#1"
    assert hits[0].score > hits[1].score


def test_scores_are_bm25_over_the_indexed_text() -> None:
    # Independent computation: every passage indexes its heading (document id, clause id, title) twice and
    # its body once (a one-letter word is no term); idf is log(1 + (N - n + 0.5) / (n + 0.5)).
    s = store(DX="# Doc title\n## 1 Alpha\nbeta beta gamma\n## 2 Delta\ngamma")
    texts = {"DX": ["dx", "doc", "title"] * 2,
             "DX#1": ["dx", "1", "alpha"] * 2 + ["beta", "beta", "gamma"],
             "DX#2": ["dx", "2", "delta"] * 2 + ["gamma"]}
    n, avg = len(texts), sum(len(t) for t in texts.values()) / len(texts)

    def bm25(term: str, pid: str) -> float:
        df = sum(term in t for t in texts.values())
        tf = texts[pid].count(term)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(texts[pid]) / avg))

    hits = {h.passage.passage_id: h.score for h in s.search("beta gamma", expand=0)}
    assert hits == {"DX#1": pytest.approx(bm25("beta", "DX#1") + bm25("gamma", "DX#1"), abs=1e-6),
                    "DX#2": pytest.approx(bm25("gamma", "DX#2"), abs=1e-6)}


def test_a_shorter_passage_with_the_same_matches_ranks_higher() -> None:
    s = store(D="# D\n## 1 A\nvalve\n## 2 B\nvalve pump motor belt chain gear shaft seal")
    assert [h.passage.passage_id for h in s.search("valve", expand=0)] == ["D#1", "D#2"]


def test_ties_go_to_the_earlier_passage_and_results_are_deterministic() -> None:
    s = store(D="# D\n## 1 A\nvalve\n## 2 B\nvalve\n## 3 C\nvalve")
    first = [h.passage.passage_id for h in s.search("valve", limit=2, expand=0)]
    assert first == ["D#1", "D#2"]
    assert all([h.passage.passage_id for h in s.search("valve", limit=2, expand=0)] == first for _ in range(5))


def test_pruned_scoring_ranks_exactly_as_scoring_every_passage() -> None:
    # A random corpus with a few very common words (the postings the pruning skips) and many rare ones.
    rng = random.Random(7)
    common, rare = ["alpha", "beta", "gamma"], [f"w{i:03d}x" for i in range(300)]
    docs = {}
    for d in range(40):
        clauses = "".join(
            f"## {c} clause\n{' '.join(rng.choices(common, k=6) + rng.choices(rare, k=rng.randint(3, 12)))}\n"
            for c in range(1, 6))
        docs[f"D{d:02d}"] = f"# D{d:02d} title\n{clause_text(rng, common, rare)}\n{clauses}"
    s = store(**docs)
    for _ in range(300):
        query = " ".join(rng.choices(common, k=rng.randint(0, 3)) + rng.choices(rare, k=rng.randint(0, 4)))
        limit = rng.randint(1, 8)
        terms = sorted((t for t in dict.fromkeys(tokens(query)) if t in s._postings),
                       key=lambda t: (-s._max[t], t))
        every: dict[int, float] = {}
        for term in terms:  # every posting of every term, in the same order of addition
            for i, w in zip(*s._postings[term], strict=True):
                every[i] = every.get(i, 0.0) + w
        expected = sorted(every.items(), key=lambda item: (-item[1], item[0]))[:limit]
        got = [(s._by_id[h.passage.passage_id], h.score) for h in s.search(query, limit=limit, expand=0)]
        assert [i for i, _ in got] == [i for i, _ in expected], query
        assert [sc for _, sc in got] == [round(sc, 6) for _, sc in expected], query


def clause_text(rng: random.Random, common: list[str], rare: list[str]) -> str:
    return " ".join(rng.choices(common, k=3) + rng.choices(rare, k=2))


def test_a_query_matching_nothing_returns_nothing_and_repeats_count_once() -> None:
    s = store(D="# D\n## 1 A\nvalve")
    assert s.search("turbine") == []
    assert s.search("valve valve valve")[0].score == s.search("valve")[0].score


def test_limits_are_checked() -> None:
    s = store(D="# D\n## 1 A\nvalve")
    with pytest.raises(ValueError):
        s.search("valve", limit=0)
    with pytest.raises(ValueError):
        s.search("valve", expand=3)


# --- wikilinks ------------------------------------------------------------------------------------

LINKED = {
    "A": "# A title\nIntro of A.\n## 1 Lockout\nlockout see [[#2]] and [[B#7|the rescue clause]] and [[A#1]]\n"
         "## 2 Tagging\ntags, see [[B]]\n",
    "B": "# B title\nIntro of B.\n## 7 Rescue\nrescue team, back to [[A#2]]\n## 8 Drill\nyearly drill\n",
}


def test_expansion_adds_the_linked_passages_at_half_the_linking_score() -> None:
    s = store(**LINKED)
    hits = s.search("lockout", limit=2)
    assert [(h.passage.passage_id, h.via, h.rank) for h in hits] == [
        ("A#1", None, 1), ("A#2", "A#1", 2), ("B#7", "A#1", 3)]
    assert hits[1].score == pytest.approx(hits[0].score * EXPANSION_DECAY, abs=1e-6)
    # Labels and targets are rendered as text; the self link is not a link.
    assert hits[0].passage.text == "lockout see A 2 and the rescue clause and A 1"
    assert hits[0].passage.links == ("A#2", "B#7")


def test_expansion_depth_two_follows_the_links_of_the_linked_and_a_document_link_is_its_own_passage() -> None:
    s = store(**LINKED)
    depth2 = [(h.passage.passage_id, h.via) for h in s.search("lockout", limit=3, expand=2)]
    assert depth2 == [("A#1", None), ("A#2", "A#1"), ("B#7", "A#1"), ("B", "A#2")]
    assert s.search("lockout", limit=3, expand=2)[3].score == pytest.approx(
        s.search("lockout", limit=3)[0].score * EXPANSION_DECAY ** 2, abs=1e-6)
    assert [h.passage.passage_id for h in s.search("lockout", limit=3, expand=0)] == ["A#1"]
    # At most `limit` passages come through links.
    assert [h.passage.passage_id for h in s.search("lockout", limit=1, expand=2)] == ["A#1", "A#2"]


def test_a_link_target_is_shown_but_not_indexed_and_a_label_is_both() -> None:
    # A#1 shows "see A 2" but a search for clause 2 finds clause 2 only: linking to a clause is not being it.
    s = store(**LINKED)
    assert "see A 2" in (s.passage("A#1") or pytest.fail()).text
    assert [h.passage.passage_id for h in s.search("2", expand=0)] == ["A#2"]
    # The author's label is text of the linking passage.
    assert "A#1" in [h.passage.passage_id for h in s.search("clause", expand=0)]


def test_expansion_never_repeats_a_hit_and_adds_at_most_limit_passages() -> None:
    s = store(**LINKED)
    ids = [h.passage.passage_id for h in s.search("lockout tags rescue", limit=3, expand=2)]
    assert len(ids) == len(set(ids))
    many = store(H="# H\n## 0 Hub\nhub " + " ".join(f"[[#{i}]]" for i in range(1, 9)) + "\n"
                   + "".join(f"## {i} Leaf\nleaf {i}\n" for i in range(1, 9)))
    hits = many.search("hub", limit=2)
    assert [h.via for h in hits].count("H#0") == 2 and len(hits) <= 4


# --- loading --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("files", "message"), [
    ({"A.md": b"# A\n## 1 One\nsee [[Z]]\n"}, "A.md:3: wikilink [[Z]] names no document of this store"),
    ({"A.md": b"# A\n## 1 One\nsee [[A#9]]\n"}, "A.md:3: wikilink [[A#9]] names no clause of A"),
    ({"A.md": b"# A\n## 1 One\n## 1 Again\n"}, "A.md:3: clause '1' appears twice"),
    ({"A.md": b"text first\n# A\n"}, "A.md:1: text before the document's '# ' title"),
    ({"A.md": b"## 1 One\n"}, "A.md:1: text before the document's '# ' title"),
    ({"A.md": b"# A\n# B\n"}, "A.md:2: a document has exactly one '# ' title"),
    ({"A.md": b"# A\n## !bad heading\n"}, "A.md:2: a clause heading starts with the clause id"),
    ({"A.md": b"---\nid: B\n---\n# A\n"}, "front matter id 'B' is not the file's name 'A'"),
    ({"A.md": b"---\nedition: x\n# A\n"}, "front matter is not closed"),
    ({"A.md": b"# A\n\xff\xfe"}, "A.md: not UTF-8"),
    ({"A.md": ("# A\n## 1 Long\n" + "word " * 900).encode()}, "A.md:2: clause 1 has 4499 characters, more than 4000"),
    ({"notes.txt": b"x", "A.md": b"# A\n"}, "notes.txt: a store holds scope.yaml and <document id>.md files only"),
    ({"a b.md": b"# A\n"}, "document id 'a b' must match"),
    ({}, "a store holds at least one document"),
])
def test_a_bad_store_does_not_load_and_says_where(files: dict[str, bytes], message: str) -> None:
    assert message in refused(files)


@pytest.mark.parametrize(("scope_yaml", "message"), [
    (b"scope: other\ntitle: T\nauthority: UNVERIFIED_DOCUMENT\n", "scope: must be 'test.kb'"),
    (b"scope: test.kb\ntitle: T\nauthority: TRUST_ME\n", "authority: one of GOVERNMENT_SOURCE"),
    (b"scope: test.kb\nauthority: UNVERIFIED_DOCUMENT\n", "title: a non-empty string is required"),
    (b"scope: test.kb\ntitle: T\nauthority: UNVERIFIED_DOCUMENT\ncolour: blue\n", "unknown field 'colour'"),
    (b"[unclosed", "not valid YAML"),
    (b"scope: test.kb\ntitle: T\nauthority: UNVERIFIED_DOCUMENT\nrelease: 1.0\n", "release: a semantic version"),
])
def test_a_bad_scope_file_does_not_load(scope_yaml: bytes, message: str) -> None:
    with pytest.raises(KnowledgeError, match=re.escape(message)):
        KnowledgeStore.from_files("test.kb", {"scope.yaml": scope_yaml, "A.md": b"# A\n"})


def test_a_store_declares_its_release_apart_from_its_content_version() -> None:
    files = {"scope.yaml": b"scope: test.kb\ntitle: T\nauthority: UNVERIFIED_DOCUMENT\nrelease: \"2.1.0\"\n",
             "A.md": b"# A\n"}
    loaded = KnowledgeStore.from_files("test.kb", files)
    assert loaded.release == "2.1.0" and loaded.version.startswith("sha256:")
    bare = KnowledgeStore.from_files("test.kb", {**files, "scope.yaml": b"scope: test.kb\ntitle: T\n"
                                                 b"authority: UNVERIFIED_DOCUMENT\n"})
    assert bare.release == ""


def test_headings_inside_code_fences_are_text() -> None:
    s = store(A="# A\n## 1 One\n```\n## not a clause\n# nor a title\n```\n")
    assert [p.passage_id for p in s.passages] == ["A", "A#1"]
    assert "## not a clause" in s.passages[1].text


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KnowledgeError, match="knowledge directory does not exist"):
        KnowledgeLibrary.load(tmp_path / "nowhere")
    with pytest.raises(KnowledgeError, match="no scope.yaml"):
        KnowledgeStore.load(tmp_path)


# --- versions -------------------------------------------------------------------------------------

def _write(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (root / name).write_bytes(content)
    return root


def _expected_version(files: dict[str, bytes]) -> str:
    sha = hashlib.sha256()
    for name, content in sorted(files.items()):
        for chunk in (name.encode(), content):
            sha.update(len(chunk).to_bytes(8, "big"))
            sha.update(chunk)
    return "sha256:" + sha.hexdigest()


def test_the_store_version_is_a_digest_of_every_file_and_changes_with_any(tmp_path: Path) -> None:
    files = {"scope.yaml": SCOPE_YAML, "A.md": b"# A\n## 1 One\nvalve\n", "B.md": b"# B\n"}
    root = _write(tmp_path / "test.kb", files)
    (root / ".A.md.swp").write_bytes(b"editor junk")  # hidden files are not knowledge
    loaded = KnowledgeStore.load(root)
    assert loaded.version == _expected_version(files)
    assert loaded.document("A") is not None
    assert loaded.document("A").version == "sha256:" + hashlib.sha256(files["A.md"]).hexdigest()  # type: ignore[union-attr]
    assert KnowledgeStore.load(root).version == loaded.version  # stable
    changed = {
        "an edit": {**files, "A.md": b"# A\n## 1 One\nvalves\n"},
        "an added document": {**files, "C.md": b"# C\n"},
        "a removed document": {k: v for k, v in files.items() if k != "B.md"},
        "a renamed document": {k if k != "B.md" else "B2.md": v for k, v in files.items()},
        "the scope file": {**files, "scope.yaml": SCOPE_YAML + b"description: more\n"},
    }
    versions = {KnowledgeStore.from_files("test.kb", f).version for f in changed.values()}
    assert len(versions) == len(changed) and loaded.version not in versions


# --- the shipped store ----------------------------------------------------------------------------

def _demo_regulations() -> set[str]:
    world: Any = yaml.safe_load(DEMO_WORLD.read_text())
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("regulation"), str):
                found.add(node["regulation"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(world)
    return found


def test_the_shipped_store_holds_every_clause_the_demo_checklists_cite() -> None:
    nr = KnowledgeLibrary.load().get("compliance.nr")
    assert nr is not None
    regulations = _demo_regulations()
    assert len(regulations) >= 9
    for regulation in sorted(regulations):
        doc, clause = regulation.split()
        assert nr.passage(f"{doc}#{clause}") is not None, regulation
        # ... and BM25 finds it for the query the compliance agent sends.
        assert nr.search(regulation, limit=5, expand=0)[0].passage.passage_id == f"{doc}#{clause}", regulation


def test_the_shipped_store_is_summaries_of_four_norms_linked_to_each_other() -> None:
    nr = KnowledgeLibrary.load().get("compliance.nr")
    assert nr is not None and KnowledgeLibrary.load().scopes == ["compliance.nr"]
    assert [d.document_id for d in nr.documents] == ["NR-01", "NR-10", "NR-33", "NR-35"]
    assert all(d.meta.get("edition") for d in nr.documents)
    assert nr.authority.value == "UNVERIFIED_DOCUMENT"
    linked = {link.split("#")[0] for p in nr.passages for link in p.links if not link.startswith(p.document_id)}
    assert linked == {"NR-01", "NR-10", "NR-33", "NR-35"}
    assert (default_knowledge_dir() / "compliance.nr" / "NR-10.md").is_file()


def test_the_backend_answers_in_the_manifest_s_output_schema(registry: CapabilityRegistry,
                                                              knowledge: KnowledgeBackend) -> None:
    ctx = InvocationContext("acme", "alice", "compliance-agent", "exe-1")
    ran = knowledge.run("knowledge.search", ctx, {"scope": "compliance.nr", "query": "NR-35 35.3.3 refresher",
                                                  "limit": 3})
    registry.validate_output(registry.get("knowledge.search").manifest, ran.output)
    nr = knowledge.library.get("compliance.nr")
    assert nr is not None
    assert ran.knowledge_version == f"compliance.nr@{nr.version}" == knowledge.version_of("compliance.nr")
    assert ran.output["hits"][0]["passage_id"] == "NR-35#35.3.3"
    assert ran.output["provenance"] == {"source": "knowledge", "authority": "UNVERIFIED_DOCUMENT",
                                        "fetched_at": "2026-11-30T09:00:00.000Z",
                                        "reference": f"compliance.nr@{nr.version}"}
    assert NOW.year == 2026
    with pytest.raises(ResourceNotFound) as info:
        knowledge.run("knowledge.search", ctx, {"scope": "training.nr", "query": "NR-35"})
    assert (info.value.reason, info.value.field) == ("KNOWLEDGE_SCOPE_NOT_FOUND", "scope")
    assert knowledge.version_of("training.nr") == ""
