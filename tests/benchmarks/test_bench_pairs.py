"""bench_pairs: what it reads from a bench_analysis run, how it compares pairs, how it refuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_pairs  # noqa: E402
from bench_pairs import Figures, RunFailed, compare, read_figures  # noqa: E402

OUTPUT = """\
analysis, 1 + 3 parallel plan, each specialist delayed 0 ms (60 runs)
  latency p50     50.5 ms   p99     57.3 ms
  overhead above the critical path p50    9.1 ms   p99   13.3 ms
throughput, no delay, 8 concurrent callers for 10 s
  {rate} analyses/s (194 analyses, {failed} not SUCCEEDED)
  CPU per analysis: 66.2 ms in the mesh's processes (2 cores allow 30 analyses/s at most), 13.7 ms of it in the kernel
    process                   CPU ms  kernel  vol. cs  invol.
    capability                 14.30    2.63    184.2    91.8
    supervisor                 13.61    2.85    181.2    87.2
    (benchmark client)          0.66    0.16      7.6     2.1
    lms                         0.54    0.13      3.0     0.8
  audit records per analysis: 31.0
  audit verify: exit {verify}: ok    service checkpoint: size 6047
"""
PROCESSES = (("capability", 14.30), ("supervisor", 13.61), ("(benchmark client)", 0.66), ("lms", 0.54))


def _output(rate: str = "19.3", failed: int = 0, verify: int = 0) -> str:
    return OUTPUT.format(rate=rate, failed=failed, verify=verify)


def test_a_runs_figures_are_read_from_what_bench_analysis_prints() -> None:
    assert read_figures(_output(), latency=True) == Figures(19.3, 66.2, 50.5, PROCESSES)
    assert read_figures(_output(), latency=False) == Figures(19.3, 66.2, None, PROCESSES)


def test_an_analysis_not_succeeded_fails_the_run() -> None:
    with pytest.raises(RunFailed, match="2 of 194 analyses were not SUCCEEDED"):
        read_figures(_output(failed=2), latency=False)


def test_a_failed_audit_verify_fails_the_run() -> None:
    with pytest.raises(RunFailed, match="audit verify exited 1"):
        read_figures(_output(verify=1), latency=False)


def test_a_missing_figure_is_named() -> None:
    throughput_only = "\n".join(line for line in _output().splitlines() if "latency" not in line)
    assert read_figures(throughput_only, latency=False).latency_ms is None
    with pytest.raises(RunFailed, match="printed no latency p50"):
        read_figures(throughput_only, latency=True)
    with pytest.raises(RunFailed, match="printed no analyses/s, CPU per analysis, audit verify"):
        read_figures("Traceback (most recent call last): ...", latency=False)


def test_pairs_are_compared_by_medians_and_wins_in_each_figures_direction() -> None:
    pairs = [(Figures(20.0, 70.0, 60.0), Figures(25.0, 60.0, 62.0)),
             (Figures(30.0, 55.0, 50.0), Figures(28.0, 57.0, 48.0)),
             (Figures(24.0, 65.0, 55.0), Figures(26.0, 61.0, 51.0))]
    rate, cpu, latency = compare(pairs)
    assert (rate.name, rate.base, rate.head, rate.better, rate.pairs) == ("analyses/s", 24.0, 26.0, 2, 3)
    assert (cpu.base, cpu.head, cpu.better) == (65.0, 60.0, 2)  # less CPU is better
    assert (latency.base, latency.head, latency.better) == (55.0, 51.0, 2)  # lower latency is better


def test_without_latency_runs_only_throughput_and_cpu_are_compared() -> None:
    rows = compare([(Figures(20.0, 70.0, None), Figures(20.0, 70.0, None))])
    assert [(r.name, r.better) for r in rows] == [("analyses/s", 0), ("CPU-ms per analysis", 0)]


def test_each_busy_process_every_run_reports_is_compared_busiest_first() -> None:
    def figures(capability: float, supervisor: float, lms: float, *extra: tuple[str, float]) -> Figures:
        return Figures(20.0, 60.0, None, (("supervisor", supervisor), ("capability", capability), ("lms", lms),
                                          *extra))

    pairs = [(figures(15.0, 12.0, 0.5, ("audit", 9.0)), figures(14.0, 13.0, 0.4)),
             (figures(16.0, 11.0, 0.5), figures(15.0, 10.0, 0.6, ("audit", 8.0))),
             (figures(14.0, 13.0, 0.5), figures(13.0, 14.0, 0.5))]
    _, _, capability, supervisor = compare(pairs)  # lms spends under 1 ms; audit is not in every run
    assert (capability.name.strip(), capability.base, capability.head, capability.better) == ("capability", 15.0,
                                                                                              14.0, 3)
    assert (supervisor.name.strip(), supervisor.base, supervisor.head, supervisor.better) == ("supervisor", 12.0,
                                                                                              13.0, 1)


def _worktrees() -> str:
    return subprocess.run(["git", "-C", str(bench_pairs.ROOT), "worktree", "list"], capture_output=True, text=True,
                          check=True).stdout


def test_a_base_git_cannot_check_out_exits_2_and_leaves_no_worktree(capsys: pytest.CaptureFixture[str]) -> None:
    before = _worktrees()
    with pytest.raises(SystemExit) as exited:
        bench_pairs.main(["--base", "no-such-revision-of-this-repository"])
    assert exited.value.code == 2
    assert "cannot check out 'no-such-revision-of-this-repository'" in capsys.readouterr().err
    assert _worktrees() == before


def test_on_postgresql_a_base_whose_bench_analysis_has_no_database_url_exits_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    before = _worktrees()
    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], capture_output=True, text=True,
                           check=True, cwd=Path(__file__).resolve().parents[2]).stdout.split()[0]
    assert bench_pairs.main(["--base", first, "--database-url", "postgresql://u@127.0.0.1:1/x"]) == 2
    assert "has no bench_analysis.py with --database-url" in capsys.readouterr().err
    assert _worktrees() == before


@pytest.mark.parametrize("bad", [["--pairs", "0"], ["--seconds", "0"], ["--concurrency", "0"],
                                 ["--latency-runs", "-1"], ["--database-url", "sqlite:///x.db"]])
def test_bad_arguments_exit_2_before_anything_runs(bad: list[str]) -> None:
    before = _worktrees()
    with pytest.raises(SystemExit) as exited:
        bench_pairs.main(["--base", "HEAD", *bad])
    assert exited.value.code == 2
    assert _worktrees() == before
