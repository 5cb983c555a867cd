"""Turn the benchmarks' JSON files into ``latest.json``, ``results.md`` and PNG plots.

    python -m bench.report      # after some or all of the benchmarks ran

Every number comes from the per-benchmark files in ``bench/results/``; nothing is measured here.
A benchmark that has not run is left out (and said to be missing in ``results.md``). Files from
older runs lack the newer keys (the pure-Python contender ``spark_python``, the decoding paths):
their rows are left out or marked "path not recorded", never an error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import machine, read_result, results_dir

__all__ = ["TARGETS", "build"]

TARGETS = {"source_ratio": 1.5, "source_ratio_2_tasks": 1.0, "source_raw_ratio": 0.5,
           "test_decoding_ratio": 1.0,
           "sink_ratio": 0.7, "sink_ratio_50": 0.7, "sink_ratio_500": 0.9, "e2e_ratio": 1.5,
           "snapshot_ratio": 1.0, "polling_ratio": 1.0}
"""Aims from the issues: a ratio at or above its target is met. ``source_ratio`` (pg_cdc, one
task, pgoutput, against the hand-written loop), ``source_raw_ratio`` (against the raw peek) and
``e2e_ratio`` (the pipeline against the hand-written one) are the compiled core's: 1.5x, 0.5x,
1.5x. The pure-Python path's figures have no target: they say what the core is worth."""
PATH_LABELS = {"compiled": "compiled core", "python": "pure Python", None: "path not recorded"}
"""How ``results.md`` names a figure's decoding path (:mod:`bench.decoding_path`); ``None``:
a run from before the paths were recorded, i.e. before the compiled core (pure Python)."""
_OTHERS = ("iggy_source_server", "iggy_source_server_varied", "iggy_source", "sink_state",
           "remote_checkpoint", "held_back", "backfill", "busy_db", "row_format", "pure_path")
"""Benchmarks listed by their summary line only."""
RSS_TARGET = 1.3  # 1M-change transaction within 1.3x the peak RSS of a 100k one
CONTENDERS = ("spark", "spark_python", "handwritten", "raw_peek")
"""The contenders of a comparison whose timing and CPU ``results.md`` lists, in this order."""


def _get(data: dict[str, Any] | None, *path: Any) -> Any:
    for key in path:
        if data is None:
            return None
        data = data[key] if isinstance(data, list) else data.get(key)
    return data


def _by_destinations(sink: dict[str, Any] | None, count: int) -> dict[str, Any] | None:
    rows = _get(sink, "results", "by_destinations") or []
    return next((r for r in rows if r["destinations"] == count), None)


def _partitions_result(results: dict[str, dict[str, Any] | None]) -> dict[str, Any] | None:
    """The ``min_partitions`` comparison from whichever run is newer: its own
    (``--partitions-only``) or the full source run's section."""
    runs = [(str(_get(r, "machine", "measured_at") or ""), section) for r, section in (
        (results.get("source_partitions"), _get(results.get("source_partitions"), "results")),
        (results["source"], _get(results["source"], "results", "partitions"))) if section]
    return max(runs, key=lambda run: run[0])[1] if runs else None


def _partitions(parts: dict[str, Any] | None) -> dict[str, int] | None:
    """pg_cdc → noop changes/s by ``min_partitions`` (pgoutput, side by side in one run)."""
    if not parts:
        return None
    return {name.removeprefix("partitions_"): value["per_second"]
            for name, value in parts.items() if name.startswith("partitions_")}


def _partition_ratios(parts: dict[str, Any] | None) -> dict[str, float] | None:
    """The same run's ratios against the hand-written loop, by ``min_partitions``."""
    if not parts:
        return None
    return {count: _get(parts, f"ratio_{count}_vs_handwritten", "median")
            for count in _partitions(parts) or {}}


def _path(result: dict[str, Any] | None, contender: str = "spark") -> str | None:
    """The decoding path ``contender`` of ``result`` was checked to be on; ``None`` if the run
    did not record it (older files)."""
    path = _get(result, "config", "decoding_paths", contender)
    return path.get("path") if isinstance(path, dict) else None


def latest(results: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """The headline figures, flat, as the docs' performance page and CI read them."""
    source, sink, e2e = results["source"], results["sink"], results["e2e"]
    latency, memory = results["latency"], results["memory"]
    headline = _get(latency, "results", "headline") or {}
    by_rate = _get(latency, "results", "by_rate") or []
    sizes = _get(memory, "results", "by_size") or []
    plugins = {p: {
        "ratio_vs_handwritten": _get(source, "results", p, "ratio_vs_handwritten", "median"),
        "ratio_vs_raw_peek": _get(source, "results", p, "ratio_vs_raw_peek", "median"),
        # the pure-Python path (pgoutput only; test_decoding is Python on both)
        "python_ratio_vs_handwritten": _get(source, "results", p, "spark_python_vs_handwritten",
                                            "median"),
        "python_ratio_vs_raw_peek": _get(source, "results", p, "spark_python_vs_raw_peek",
                                         "median"),
        "ratio_compiled_vs_python": _get(source, "results", p, "ratio_vs_spark_python",
                                         "median"),
        "changes_per_second": {c: _get(source, "results", p, c, "per_second")
                               for c in ("spark", "spark_python", "handwritten", "raw_peek")},
        "paths": {"spark": _path(source) if p == "pgoutput" else "python",
                  "spark_python": _path(source, "spark_python")},
    } for p in ("pgoutput", "test_decoding")}
    parts = _partitions_result(results)
    partition_ratios = _partition_ratios(parts)
    figures: dict[str, Any] = {
        "source_ratio": plugins["pgoutput"]["ratio_vs_handwritten"],
        # the default is one task per batch; this machine's two cores, used by two
        "source_ratio_2_tasks": (partition_ratios or {}).get("2"),
        "source_ratio_by_partitions": partition_ratios,
        "source_raw_ratio": plugins["pgoutput"]["ratio_vs_raw_peek"],
        "source_path": plugins["pgoutput"]["paths"]["spark"],
        "source_python_ratio": plugins["pgoutput"]["python_ratio_vs_handwritten"],
        "source_python_raw_ratio": plugins["pgoutput"]["python_ratio_vs_raw_peek"],
        "source_compiled_vs_python": plugins["pgoutput"]["ratio_compiled_vs_python"],
        "test_decoding_ratio": plugins["test_decoding"]["ratio_vs_handwritten"],
        "sink_ratio": _get(_by_destinations(sink, 1), "ratio_vs_handwritten", "median"),
        "sink_ratio_50": _get(_by_destinations(sink, 50), "ratio_vs_handwritten", "median"),
        "sink_ratio_500": _get(_by_destinations(sink, 500), "ratio_vs_handwritten", "median"),
        "e2e_ratio": _get(e2e, "results", "ratio_vs_handwritten", "median"),
        "e2e_path": _path(e2e),
        "e2e_python_ratio": _get(e2e, "results", "spark_python_vs_handwritten", "median"),
        "e2e_compiled_vs_python": _get(e2e, "results", "ratio_vs_spark_python", "median"),
        "snapshot_ratio": _get(results["snapshot"], "results", "ratio_vs_handwritten", "median"),
        "snapshot_ratio_vs_copy": _get(results["snapshot"], "results", "ratio_vs_copy", "median"),
        "snapshot_1m_ratio": _get(results["snapshot_1m"], "results", "ratio_vs_handwritten",
                                  "median"),
        "polling_ratio": _get(results["polling"], "results", "ratio_vs_handwritten", "median"),
        "reliability": {k: _get(results["reliability"], k) for k in (
            "faults_injected", "changes", "missing", "invented", "duplicates", "order_violations",
            "slot_ahead_of_checkpoint", "verdict")},
        "rss_ratio_1m_vs_100k": _get(memory, "results", "ratio_last_vs_first"),
        "latency_p50_s": headline.get("p50_s"),
        "latency_p99_s": headline.get("p99_s"),
        "latency_rate_changes_per_second": headline.get("target_changes_per_second"),
        "latency_rate_sustained": headline.get("sustained"),
        "latency_10k_sustained": any(r["target_changes_per_second"] >= 10_000 and r["sustained"]
                                     for r in by_rate),
        "latency_by_rate": [{k: r.get(k) for k in (
            "target_changes_per_second", "achieved_changes_per_second", "sustained", "p50_s",
            "p99_s")} for r in by_rate],
        "source_changes_per_second": plugins["pgoutput"]["changes_per_second"],
        "source_partitions": _partitions(parts),
        "sink_messages_per_second": {
            str(r["destinations"]): {c: r[c]["per_second"] for c in ("spark", "handwritten")}
            for r in _get(sink, "results", "by_destinations") or []},
        "e2e_changes_per_second": {c: v["per_second"]
                                   for c, v in (_get(e2e, "results") or {}).items()
                                   if "per_second" in v},
        "peak_reader_rss_bytes": {str(s["changes"]): s["peak_reader_rss_bytes"] for s in sizes},
        "plugins": plugins,
    }
    met = {name: figures[name] is not None and figures[name] >= target
           for name, target in TARGETS.items()}
    ratio = figures["rss_ratio_1m_vs_100k"]
    met["rss_ratio_1m_vs_100k"] = ratio is not None and ratio <= RSS_TARGET
    return {**figures, "targets": {**TARGETS, "rss_ratio_1m_vs_100k": RSS_TARGET},
            "targets_met": met, "machine": machine(),
            "measured_at": {n: _get(r, "machine", "measured_at") for n, r in results.items()}}


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.2f}{unit}"
    if isinstance(value, int):
        return f"{value:,}{unit}"
    return f"{value}{unit}"


def markdown(figures: dict[str, Any], results: dict[str, dict[str, Any] | None]) -> str:
    """``results.md``: every comparison with both sides' rates, what each side does, the ratio."""
    m = figures["machine"]
    lines = [
        "# Benchmark results",
        "",
        f"Machine: {m['cores']} cores, {m['memory_bytes'] / 2**30:.1f} GiB, {m['cpu']}; "
        f"{m['platform']}; Python {m['python']}; pyspark {m['packages']['pyspark']}. "
        "Each comparison ran side by side, interleaved round by round; the ratio is the median "
        "of the per-round ratios. Spark is timed from its first micro-batch's start to its last "
        "one's end (JVM and query start-up excluded). Details: the JSON files next to this one.",
        "",
        "Each `pg_cdc` side says its decoding path: *compiled core* (iggy-spark-core) or *pure "
        "Python* (`IGGY_SPARK_CORE=python`, a second Spark session in a process of its own, "
        "interleaved with the first), as checked in the session's process, its Python workers "
        "and every run's source runner; *path not recorded*: a run from before that check, "
        "i.e. before the compiled core (pure Python). test_decoding has no compiled decoder.",
        "",
        "| comparison | project | rate | baseline | rate | ratio | target |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: |",
    ]
    source, sink, e2e = results["source"], results["sink"], results["e2e"]
    lines += _source_rows(figures)
    for row in _get(sink, "results", "by_destinations") or []:
        lines.append(
            f"| sink, {row['destinations']} destination(s) | DataFrame → `iggy_routed` | "
            f"{_fmt(row['spark']['per_second'])} msg/s | hand-written SDK loop | "
            f"{_fmt(row['handwritten']['per_second'])} msg/s | "
            f"{_fmt(row['ratio_vs_handwritten']['median'])}x | "
            f"{0.9 if row['destinations'] >= 500 else 0.7}x |")
    lines += _e2e_rows(figures, e2e)
    for name, what in (("snapshot", "`pg_cdc` `snapshot=initial` → noop"),
                       ("polling", "`pg_cdc` `mode=polling` → noop")):
        data = _get(results[name], "results")
        if data:
            lines.append(
                f"| {name} | {what} | {_fmt(data['spark']['per_second'])} rows/s | "
                f"hand-written psycopg loop | {_fmt(data['handwritten']['per_second'])} rows/s | "
                f"{_fmt(figures[f'{name}_ratio'])}x | 1.0x |")
    lines += ["", "What each side does (timed):", ""]
    sides = {"source": _get(source, "results", "pgoutput"), "sink": _by_destinations(sink, 1),
             "end to end": _get(e2e, "results")}
    for name, data in sides.items():
        for contender in CONTENDERS:
            timed = _get(data, contender, "timed")
            if timed:
                lines.append(f"- {name}, `{contender}`: {timed}"
                             + (" (pure-Python path, in a second session)"
                                if contender == "spark_python" else ""))
    lines += _cpu_lines(sides)
    lines += _latency_lines(results["latency"]) + _memory_lines(results["memory"], figures)
    lines += ["", "Other benchmarks:", ""]
    for name in ("decoders", "broker", "snapshot", "polling", *_OTHERS):
        summary = _get(results.get(name), "summary") or _fault_summary(results.get(name))
        lines.append(f"- {name}: {summary or 'not run'}")
    faults = figures["reliability"]
    if faults["faults_injected"] is not None:
        lines.append("- reliability (fault campaign, oracle read-back): "
                     + ", ".join(f"{k.replace('_', ' ')} {_fmt(v)}" for k, v in faults.items()))
    missing = [name for name, data in results.items() if data is None]
    if missing:
        lines += ["", f"Not run: {', '.join(missing)}."]
    lines += ["", *(f"![{p.stem}]({p.name})" for p in sorted(results_dir().glob("*.png")))]
    return "\n".join(lines) + "\n"


def _source_rows(figures: dict[str, Any]) -> list[str]:
    """The source comparisons' rows: per plugin, pg_cdc on each decoding path against
    the hand-written loop and the raw peek, then compiled against pure Python."""
    lines: list[str] = []
    bases = (("handwritten", "hand-written psycopg loop"), ("raw_peek", "raw peek, no parsing"))
    for plugin in ("pgoutput", "test_decoding"):
        figure = figures["plugins"][plugin]
        rates, paths = figure["changes_per_second"], figure["paths"]
        targets = ({"handwritten": TARGETS["source_ratio"],
                    "raw_peek": TARGETS["source_raw_ratio"]} if plugin == "pgoutput" else
                   {"handwritten": TARGETS["test_decoding_ratio"]})
        spark = ("spark", "ratio_vs_", PATH_LABELS[paths["spark"]] if plugin == "pgoutput"
                 else "Python (no compiled decoder)")
        python = ("spark_python", "python_ratio_vs_", PATH_LABELS["python"])
        for contender, prefix, label in (spark, python):
            if contender == "spark_python" and rates[contender] is None:
                continue  # no pure-Python run (test_decoding, or an older file)
            for base, what in bases:
                target = targets.get(base) if contender == "spark" else None
                lines.append(
                    f"| source, {plugin}, one task | `pg_cdc` → noop, {label} | "
                    f"{_fmt(rates[contender])}/s | {what} | {_fmt(rates[base])}/s | "
                    f"{_fmt(figure[prefix + base])}x | {f'{target}x' if target else ''} |")
        if rates["spark_python"] is not None:
            lines.append(
                f"| source, {plugin}, compiled / pure | `pg_cdc` → noop, "
                f"{PATH_LABELS[paths['spark']]} | {_fmt(rates['spark'])}/s | `pg_cdc` → noop, "
                f"{PATH_LABELS['python']} | {_fmt(rates['spark_python'])}/s | "
                f"{_fmt(figure['ratio_compiled_vs_python'])}x | |")
    return lines


def _e2e_rows(figures: dict[str, Any], e2e: dict[str, Any] | None) -> list[str]:
    """The end-to-end comparisons' rows, the pure-Python path's too if it ran."""
    if not e2e:
        return []
    lines: list[str] = []
    rates = figures["e2e_changes_per_second"]
    label, hand = PATH_LABELS[figures["e2e_path"]], "hand-written single-process pipeline"
    lines.append(
        f"| end to end, pgoutput, one task | `pg_cdc` → `iggy_routed`, {label} | "
        f"{_fmt(rates['spark'])}/s | {hand} | {_fmt(rates['handwritten'])}/s | "
        f"{_fmt(figures['e2e_ratio'])}x | {TARGETS['e2e_ratio']}x |")
    if "spark_python" in rates:
        pure = PATH_LABELS["python"]
        lines += [
            f"| end to end, pgoutput, one task | `pg_cdc` → `iggy_routed`, {pure} | "
            f"{_fmt(rates['spark_python'])}/s | {hand} | {_fmt(rates['handwritten'])}/s | "
            f"{_fmt(figures['e2e_python_ratio'])}x | |",
            f"| end to end, compiled / pure | `pg_cdc` → `iggy_routed`, {label} | "
            f"{_fmt(rates['spark'])}/s | `pg_cdc` → `iggy_routed`, {pure} | "
            f"{_fmt(rates['spark_python'])}/s | {_fmt(figures['e2e_compiled_vs_python'])}x "
            "| |"]
    for name, rate in rates.items():
        if name.startswith("spark_partitions_"):
            count = name.removeprefix("spark_partitions_")
            ratio = _get(e2e, "results", f"ratio_partitions_{count}_vs_handwritten", "median")
            lines.append(
                f"| end to end, `min_partitions={count}` | `pg_cdc` → `in_key_order` → "
                f"`iggy_routed`, {label} | {_fmt(rate)}/s | {hand} | "
                f"{_fmt(rates['handwritten'])}/s | {_fmt(ratio)}x | |")
    return lines

def _fault_summary(data: dict[str, Any] | None) -> str | None:
    """The one line of a fault scenario's result (it has no summary of its own)."""
    if not data or "scenario" not in data:
        return None
    kills = data["kills"]
    return (f"{data['scenario']}: {len(kills) if isinstance(kills, list) else kills} kill(s), "
            f"{_fmt(data['changes'])} changes, missing {data['missing']}, duplicates "
            f"{data['duplicates']}, order violations {data['order_violations']}, oracle "
            f"{'ok' if data['oracle_ok'] else 'FAILED'}")


def _cpu_lines(sides: dict[str, Any]) -> list[str]:
    """Where the time went: median CPU seconds per process group during one run of each side."""
    rows = [(name, contender, _get(data, contender, "median_cpu_seconds"))
            for name, data in sides.items() for contender in CONTENDERS]
    rows = [r for r in rows if r[2]]
    if not rows:
        return []
    groups = sorted({g for _, _, cpu in rows for g in cpu})
    lines = ["", "CPU seconds per run (median) by process group, over each side's whole call: for "
             "Spark that includes query start-up, which the rates above exclude: the driver-side "
             "Python source runner of each query (`python_runner`: importing pyspark, planning "
             "and committing offsets) apart from the executors' Python workers "
             "(`python_workers`: the per-change work). `spark_python`'s are its "
             "own session's (JVM, Python workers, driver process in `bench_process`).", "",
             "| run | " + " | ".join(groups) + " |", "| --- |" + " ---: |" * len(groups)]
    for name, contender, cpu in rows:
        lines.append(f"| {name}, `{contender}` | "
                     + " | ".join(_fmt(cpu.get(g)) for g in groups) + " |")
    return lines


def _latency_lines(latency: dict[str, Any] | None) -> list[str]:
    if latency is None:
        return []
    lines = ["", f"Latency, Postgres commit → visible in Iggy ({latency['config']['trigger']}):",
             "", "| target rate | achieved | sustained | p50 | p99 | max |",
             "| ---: | ---: | --- | ---: | ---: | ---: |"]
    for r in latency["results"]["by_rate"]:
        lines.append(f"| {_fmt(r['target_changes_per_second'])}/s | "
                     f"{_fmt(r['achieved_changes_per_second'])}/s | "
                     f"{'yes' if r['sustained'] else 'no'} | {_fmt(r.get('p50_s'), ' s')} | "
                     f"{_fmt(r.get('p99_s'), ' s')} | {_fmt(r.get('max_s'), ' s')} |")
    return lines


def _memory_lines(memory: dict[str, Any] | None, figures: dict[str, Any]) -> list[str]:
    if memory is None:
        return []
    lines = ["", f"Memory, one transaction read by `pg_cdc` ({memory['config']['options']}):", "",
             "| changes | reading worker peak RSS | all Python workers peak RSS |",
             "| ---: | ---: | ---: |"]
    for s in memory["results"]["by_size"]:
        lines.append(f"| {_fmt(s['changes'])} | {s['peak_reader_rss_bytes'] / 2**20:.0f} MiB | "
                     f"{s['peak_total_rss_bytes'] / 2**20:.0f} MiB |")
    lines.append(f"\nRatio largest/smallest: {_fmt(figures['rss_ratio_1m_vs_100k'])}x "
                 f"(target <= {RSS_TARGET}x).")
    return lines


def plots(results: dict[str, dict[str, Any] | None], figures: dict[str, Any]) -> list[Path]:
    """One PNG per question, written with matplotlib's Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    def save(name: str, draw: Callable[[Any], None], title: str) -> None:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        draw(ax)
        ax.set_title(title, fontsize=11)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = results_dir() / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    source, sink = results["source"], results["sink"]
    sweep = _get(source, "results", "max_bytes_sweep")
    if sweep:
        def draw_sweep(ax: Any) -> None:
            limited = [p for p in sweep if p["bytes"]]
            ax.plot([p["bytes"] / 2**20 for p in limited],
                    [p["changes_per_second"] for p in limited], "o-", label="pg_cdc → noop")
            unlimited = next(p for p in sweep if not p["bytes"])
            ax.axhline(unlimited["changes_per_second"], color="C0", ls=":",
                       label="pg_cdc, unlimited (one batch)")
            hand = _get(source, "results", "pgoutput", "handwritten", "per_second")
            if hand:
                ax.axhline(hand, color="C1", ls="--", label="hand-written loop")
            for p in limited:
                ax.annotate(f"{p['batches']} batches",
                            (p["bytes"] / 2**20, p["changes_per_second"]),
                            textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
            ax.set_xscale("log")
            ax.set_xlabel("max_bytes_per_trigger (MiB of WAL)")
            ax.set_ylabel("changes / s")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8)
        save("source_max_bytes", draw_sweep,
             "pg_cdc throughput vs max_bytes_per_trigger (pgoutput)")
    by_count = figures.get("source_partitions")
    if by_count:
        def draw_partitions(ax: Any) -> None:
            counts = [int(n) for n in by_count]
            ax.plot(counts, list(by_count.values()), "o-", label="pg_cdc → noop (pgoutput)")
            parts = _partitions_result(results)
            hand = _get(parts, "handwritten", "per_second")
            if hand:
                ax.axhline(hand, color="C1", ls="--", label="hand-written loop (one process)")
            raw = _get(parts, "raw_peek", "per_second")
            if raw:
                ax.axhline(raw, color="C2", ls=":", label="raw peek, one backend")
            ax.set_xticks(counts, [str(c) for c in counts])
            ax.set_xlabel("min_partitions (tasks per batch; 2 cores here)")
            ax.set_ylabel("changes / s")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8)
        save("source_partitions", draw_partitions,
             "pg_cdc throughput vs partitions per batch (one slot)")
    rows = _get(sink, "results", "by_destinations")
    if rows:
        def draw_sink(ax: Any) -> None:
            counts = [r["destinations"] for r in rows]
            for contender, label in (("spark", "iggy_routed"), ("handwritten", "hand-written SDK")):
                ax.plot(counts, [r[contender]["per_second"] for r in rows], "o-", label=label)
            ax.set_xscale("log")
            ax.set_xticks(counts, [str(c) for c in counts])
            ax.set_xlabel("destinations (topics)")
            ax.set_ylabel("messages / s")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8)
        save("sink_destinations", draw_sink, "Sink throughput vs number of destinations")
    by_rate = _get(results["latency"], "results", "by_rate")
    if by_rate:
        def draw_latency(ax: Any) -> None:
            shown = [r for r in by_rate if r.get("p50_s") is not None]
            labels = [f"{r['target_changes_per_second']:,}/s"
                      + ("" if r["sustained"] else "\n(not sustained)") for r in shown]
            xs = range(len(shown))
            ax.bar([x - 0.2 for x in xs], [r["p50_s"] for r in shown], 0.4, label="p50")
            ax.bar([x + 0.2 for x in xs], [r["p99_s"] for r in shown], 0.4, label="p99")
            ax.set_xticks(list(xs), labels)
            ax.set_ylabel("seconds, commit → visible in Iggy")
            ax.legend(fontsize=8)
        save("latency", draw_latency, "End-to-end latency (pg_cdc → iggy_routed)")
    ratios = {k: figures[k] for k in TARGETS if figures.get(k) is not None}
    if ratios:
        def draw_ratios(ax: Any) -> None:
            names = list(ratios)
            ax.barh(names, [ratios[n] for n in names],
                    color=["C2" if figures["targets_met"][n] else "C3" for n in names])
            ax.scatter([TARGETS[n] for n in names], names, marker="|", s=400, color="k",
                       label="target", zorder=3)
            ax.axvline(1.0, color="grey", lw=0.8)
            ax.set_xlabel("project / baseline (higher is better)")
            ax.legend(fontsize=8, loc="lower right")
        save("ratios", draw_ratios, "Ratios against the baselines (same run, same data)")
    return written


def build() -> dict[str, Any]:
    """Write ``latest.json``, ``results.md`` and the plots from whatever results exist."""
    names = ("source", "sink", "e2e", "latency", "memory", "decoders", "broker", "snapshot",
             "snapshot_1m", "polling", "reliability", "source_partitions", *_OTHERS)
    results = {name: read_result(name) for name in names}
    figures = latest(results)
    (results_dir() / "latest.json").write_text(json.dumps(figures, indent=2) + "\n")
    plots(results, figures)
    (results_dir() / "results.md").write_text(markdown(figures, results))
    return figures


if __name__ == "__main__":
    print(json.dumps({k: v for k, v in build().items() if not isinstance(v, dict | list)},
                     indent=2))
    sys.exit(0)
