"""``specd pilot report DIR``: the figures, the verdicts, Markdown + JSON + PNG plots.

Reads what ``specd pilot run`` wrote (``run.json`` and ``raw/``) and computes everything
from the raw per-request results and ``/metrics`` scrapes, so a report can be rebuilt (or
its rule changed) without sending a request. Failed requests (timeouts, 429s, errors) stay
in every denominator: attainment and goodput are over the requests sent, not the requests
that succeeded.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from specd.pilot import promtext, verdict
from specd.pilot.config import GROUPS, ROLES, SLO, Pilot
from specd.pilot.load import RequestResult
from specd.pilot.stats import mean, mean_ci, percentile

ALL = "all"
OUTCOMES = ("ok", "timeout", "rejected", "error")


def _result(raw: dict[str, Any]) -> RequestResult:
    raw = {k: v for k, v in raw.items() if k != "tpot_s"}
    return RequestResult(**raw)


def summarize(results: list[RequestResult], slo: SLO, duration_s: float) -> dict[str, Any]:
    """One group x trace x repeat (x task group): the per-request figures."""
    measured = [r for r in results if not r.warmup]
    ok = [r for r in measured if r.outcome == "ok"]
    met = [r for r in measured if r.meets(slo)]
    out: dict[str, Any] = {
        "requests": len(measured), "warmup_excluded": sum(r.warmup for r in results),
        "ok": len(ok), "met_slo": len(met),
        "attainment": len(met) / len(measured) if measured else None,
        "goodput_rps": len(met) / duration_s, "throughput_rps": len(ok) / duration_s,
        "timeouts": sum(r.outcome == "timeout" for r in measured),
        "rejected_429": sum(r.outcome == "rejected" for r in measured),
        "errors": sum(r.outcome == "error" for r in measured),
        "tokens": sum(r.tokens for r in ok),
        "lag_p99_s": percentile([r.lag_s for r in measured], 99),
    }
    for key, values in (("ttft", [r.ttft_s for r in ok]), ("tpot", [r.tpot_s for r in ok]),
                        ("e2e", [r.e2e_s for r in ok])):
        vs = [v for v in values if v is not None]
        for q in (50, 95, 99):
            out[f"{key}_p{q}_s"] = percentile(vs, q)
    total = sum(r.e2e_s or 0.0 for r in ok)
    decode = sum((r.e2e_s or 0.0) - (r.ttft_s or 0.0) for r in ok)
    out["decode_share"] = decode / total if total else None
    return out


def _ci(values: list[float | None]) -> dict[str, Any]:
    vs = [v for v in values if v is not None]
    mu, half = mean_ci(vs)
    return {"mean": mu, "ci95": half, "per_repeat": values}


class Data:
    """Everything under DIR, loaded once."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        self.index = json.loads((folder / "run.json").read_text())
        self.pilot = Pilot.model_validate(self.index["pilot"])
        self.slo = self.pilot.slo
        self.runs: list[dict[str, Any]] = []
        for entry in self.index["runs"]:
            raw = json.loads((folder / entry["file"]).read_text())
            raw["results"] = [_result(r) for r in raw["results"]]
            self.runs.append(raw)

    def trace_runs(self, trace: str) -> list[dict[str, Any]]:
        return [r for r in self.runs if r.get("phase") == "trace" and r.get("trace") == trace]

    def trace_spec(self, name: str) -> Any:
        return next(t for t in self.pilot.traces if t.name == name)


def request_figures(data: Data) -> dict[str, Any]:
    """trace -> task group (or all) -> group -> per-repeat summaries + means with CIs."""
    out: dict[str, Any] = {}
    groups = [ALL, *data.pilot.task_groups]
    for t in data.pilot.traces:
        runs = data.trace_runs(t.name)
        if not runs:
            continue
        per: dict[str, Any] = {}
        for tg in groups:
            per[tg] = {}
            for g in GROUPS:
                reps = sorted((r for r in runs if r["group"] == g), key=lambda r: r["repeat"])
                sums = [summarize([x for x in r["results"] if tg == ALL or x.task_group == tg],
                                  data.slo, t.duration_s) for r in reps]
                pooled = summarize([x for r in reps for x in r["results"]
                                    if tg == ALL or x.task_group == tg], data.slo,
                                   t.duration_s * max(1, len(reps)))
                per[tg][g] = {"repeats": sums, "pooled": pooled, **{
                    k: _ci([s[k] for s in sums]) for k in
                    ("goodput_rps", "attainment", "e2e_p50_s", "e2e_p99_s", "ttft_p95_s")}}
        per["_lang"] = {lang: {g: summarize(
            [x for r in runs if r["group"] == g for x in r["results"] if x.lang == lang],
            data.slo, t.duration_s * max(1, len([r for r in runs if r["group"] == g])))
            for g in GROUPS} for lang in ("en", "zh")}
        out[t.name] = per
    return out


def window_figures(data: Data) -> dict[str, Any]:
    """trace -> group -> per-repeat windows, the steady-window sums and the reconciliation."""
    out: dict[str, Any] = defaultdict(dict)
    for t in data.pilot.traces:
        for run in data.trace_runs(t.name):
            scrapes = [(s["t"], s["text"]) for s in run["scrapes"]]
            ws = promtext.windows(scrapes)
            good = [(tt, text) for tt, text in scrapes if text is not None]
            reconciled = None
            if len(good) >= 2 and not any(w.reset for w in ws):
                first = promtext.totals(promtext.parse(good[0][1]))
                last = promtext.totals(promtext.parse(good[-1][1]))
                s = promtext.summed(ws)
                reconciled = all(abs((last[k] - first[k]) - s[k]) < 1e-6 * max(1.0, abs(s[k]))
                                 for k in promtext.KEYS)
            steady = [w for w in ws if w.t0 >= t.warmup_s - 1e-9][:-1] or ws
            total = promtext.summed(steady)
            by_tg = {}
            for tg in data.pilot.task_groups:
                tws = promtext.windows(scrapes, task_group=tg)
                d = promtext.summed([w for w in tws if w.t0 >= t.warmup_s - 1e-9][:-1] or tws)
                by_tg[tg] = {"committed": d["committed"], "drafted": d["drafted"],
                             "verified": d["verified"], "accepted": d["accepted"],
                             "tau": d["tau_sum"] / d["tau_count"] if d["tau_count"] else None}
            entry = out[t.name].setdefault(run["group"], {"repeats": []})
            entry["repeats"].append({
                "repeat": run["repeat"], "windows": [w.to_json() for w in ws],
                "steady": {**total, **promtext.derive(total)}, "reconciled": reconciled,
                "by_task_group": by_tg, "server_alive": run.get("server_alive"),
                "memory": run.get("memory")})
    for per_group in out.values():
        for entry in per_group.values():
            total = dict.fromkeys(promtext.KEYS, 0.0)
            for rep in entry["repeats"]:
                for k in promtext.KEYS:
                    total[k] += rep["steady"][k]
            entry["steady"] = {**total, **promtext.derive(total)}
    return dict(out)


def trace_greedy(data: Data) -> dict[str, Any]:
    """Every request that finished on G0 and on another group: the same text?"""
    out: dict[str, Any] = {}
    for g in ("G1", "G2"):
        same = diff = 0
        by_tg: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        examples: list[dict[str, Any]] = []
        for t in data.pilot.traces:
            runs = data.trace_runs(t.name)
            for r0 in (r for r in runs if r["group"] == "G0"):
                other = next((r for r in runs if r["group"] == g
                              and r["repeat"] == r0["repeat"]), None)
                if other is None:
                    continue
                for a, b in zip(r0["results"], other["results"], strict=False):
                    if a.outcome != "ok" or b.outcome != "ok":
                        continue
                    if a.text == b.text:
                        same += 1
                        by_tg[a.task_group][0] += 1
                    else:
                        diff += 1
                        by_tg[a.task_group][1] += 1
                        if len(examples) < 5:
                            at = next((i for i, (x, y) in enumerate(zip(a.text, b.text,
                                                                        strict=False))
                                       if x != y), min(len(a.text), len(b.text)))
                            examples.append({"trace": t.name, "repeat": r0["repeat"],
                                             "index": a.index, "task_group": a.task_group,
                                             "char": at, "G0": a.text[max(0, at - 20):at + 20],
                                             g: b.text[max(0, at - 20):at + 20]})
        out[g] = {"identical": same, "different": diff, "by_task_group": dict(by_tg),
                  "examples": examples}
    out["traced"] = data.index.get("trace_divergences", [])
    return out


def regression_summary(data: Data) -> dict[str, Any]:
    checks = data.index.get("regression", [])
    per: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for c in checks:
        per[c["group"]][c["check"]][0 if c["ok"] else 1] += 1
    g1_failed = [c for c in checks if c["group"] == "G1" and not c["ok"]]
    traced = data.index.get("trace_divergences", [])
    real = [d for d in traced if d.get("outcome") == "different"]
    ok = bool(checks) and not g1_failed and not real
    note = "; ".join(f"{c['check']} ({c['task_group']}): {c['detail']}" for c in g1_failed[:3])
    if real:
        note += f"; {len(real)} trace divergences are real differences"
    return {"ok": ok, "note": note or ("no checks ran" if not checks else ""),
            "counts": {g: dict(v) for g, v in per.items()}, "checks": checks}


def verdicts(data: Data, figures: dict[str, Any], regression: dict[str, Any]) -> dict[str, Any]:
    roles = {}
    for role in ("flat", "peak", "burst"):
        t = next((t for t in data.pilot.traces if t.role == role and t.name in figures), None)
        roles[role] = t
    if roles["flat"] is None or roles["peak"] is None:
        return {"_note": "no verdict: the pilot needs a trace with role flat and one with "
                         "role peak"}
    cap0 = data.index["capacity"].get("G0", {}).get("capacity_rps")
    penalty = data.slo.timeout_s
    out = {}
    for tg in [*data.pilot.task_groups, ALL]:
        def arms(t: Any, tg: str = tg) -> dict[str, verdict.Arm]:
            per = figures[t.name][tg]
            return {g: verdict.Arm(
                [s["goodput_rps"] for s in per[g]["repeats"]],
                [s["e2e_p50_s"] if s["e2e_p50_s"] is not None else penalty
                 for s in per[g]["repeats"]],
                [s["e2e_p99_s"] if s["e2e_p99_s"] is not None else penalty
                 for s in per[g]["repeats"]]) for g in GROUPS}
        lf = roles["flat"].load or 0.5
        lp = roles["peak"].load or 0.9
        v = verdict.decide(arms(roles["flat"]), arms(roles["peak"]),
                           arms(roles["burst"]) if roles["burst"] else None, lf, lp, cap0,
                           regression["ok"], regression["note"])
        out[tg] = v.to_json()
    return out


def cost_view(data: Data, windows: dict[str, Any]) -> dict[str, Any]:
    groups = data.index["groups"]
    cap = data.index["capacity"]
    peak: dict[str, int] = {}
    for r in data.runs:
        m = r.get("memory") or {}
        if m.get("peak_rss"):
            peak[r["group"]] = max(peak.get(r["group"], 0), m["peak_rss"])
    idle = {g: (groups[g].get("idle_memory") or {}).get("rss") for g in GROUPS}
    slots = {g: (data.pilot.groups[g].serve.max_slots if data.pilot.groups[g].serve else None)
             for g in GROUPS}
    c = {g: (cap.get(g) or {}).get("capacity_rps") for g in GROUPS}
    draft_share = [w["steady"].get("draft_share") for t in windows.values()
                   for g, w in t.items() if g == "G1" and w["steady"].get("draft_share")]
    out: dict[str, Any] = {"peak_rss_mb": {g: peak[g] / 2**20 for g in peak},
                           "idle_rss_mb": {g: (v / 2**20 if v else None) for g, v in idle.items()},
                           "capacity_rps": c, "max_slots": slots,
                           "cold_start_s": {g: groups[g].get("cold_start_s") for g in GROUPS},
                           "g1_draft_share_of_round_time": mean(draft_share)}
    if c["G0"] and c["G1"] is not None:
        out["capacity_lost_to_drafter"] = 1 - c["G1"] / c["G0"]
    if idle["G0"] and idle["G1"]:
        out["drafter_memory_mb"] = (idle["G1"] - idle["G0"]) / 2**20
    if idle["G0"] and idle["G2"] and slots["G0"] and slots["G2"] and slots["G2"] != slots["G0"]:
        out["memory_per_slot_mb"] = (idle["G2"] - idle["G0"]) / 2**20 / (slots["G2"] - slots["G0"])
    return out


# ---- rendering ---------------------------------------------------------------------------

def _f(v: Any, digits: int = 3, unit: str = "") -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}g}{unit}"
    return f"{v}{unit}"


def _mci(d: dict[str, Any], digits: int = 3) -> str:
    if d["mean"] is None:
        return "–"
    return f"{d['mean']:.{digits}g}" + (f" ± {d['ci95']:.2g}" if d["ci95"] is not None else "")


def plots(data: Data, figures: dict[str, Any], windows: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"G0": "tab:gray", "G1": "tab:blue", "G2": "tab:orange"}
    made = []
    # 1. capacity sweep
    fig, ax = plt.subplots(figsize=(6, 4))
    for g in GROUPS:
        steps = sorted((data.index["capacity"].get(g) or {}).get("steps", []),
                       key=lambda s: s["rate"])
        if steps:
            ax.plot([s["rate"] for s in steps], [s["attainment"] for s in steps], "o-",
                    color=colors[g], label=g)
    ax.axhline(data.slo.attainment, ls="--", color="k", lw=0.8, label="SLO attainment")
    ax.set_xlabel("offered rate (req/s, Poisson)")
    ax.set_ylabel("SLO attainment")
    ax.set_title("capacity sweep")
    ax.legend()
    fig.tight_layout()
    fig.savefig(data.dir / "capacity.png", dpi=110)
    plt.close(fig)
    made.append("capacity.png")
    # 2. goodput and p99 per trace x task group
    names = list(figures)
    tgs = [ALL, *data.pilot.task_groups]
    for metric, fname, label in (("goodput_rps", "goodput.png", "goodput (req/s meeting SLO)"),
                                 ("e2e_p99_s", "e2e_p99.png", "end-to-end p99 (s)")):
        fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 4), squeeze=False)
        for ax, t in zip(axes[0], names, strict=True):
            width = 0.27
            for k, g in enumerate(GROUPS):
                ys = [figures[t][tg][g][metric]["mean"] or 0 for tg in tgs]
                es = [figures[t][tg][g][metric]["ci95"] or 0 for tg in tgs]
                ax.bar([i + (k - 1) * width for i in range(len(tgs))], ys, width, yerr=es,
                       color=colors[g], label=g, capsize=2)
            ax.set_xticks(range(len(tgs)), tgs, rotation=30)
            ax.set_title(t)
            ax.set_ylabel(label)
        axes[0][0].legend()
        fig.tight_layout()
        fig.savefig(data.dir / fname, dpi=110)
        plt.close(fig)
        made.append(fname)
    # 3. per-window decode cost per committed token (repeat 0)
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 4), squeeze=False)
    for ax, t in zip(axes[0], names, strict=True):
        for g in GROUPS:
            reps = (windows.get(t, {}).get(g) or {}).get("repeats") or []
            if not reps:
                continue
            ws = reps[0]["windows"]
            pts = [((w["t0"] + w["t1"]) / 2, w["cost_per_token_ms"]) for w in ws
                   if w["cost_per_token_ms"] is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=colors[g], label=g)
        ax.set_title(f"{t} (repeat 0)")
        ax.set_xlabel("trace time (s)")
        ax.set_ylabel("decode ms per committed token")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(data.dir / "windows.png", dpi=110)
    plt.close(fig)
    made.append("windows.png")
    return made


def markdown(data: Data, rep: dict[str, Any]) -> str:
    p = data.pilot
    L: list[str] = []
    add = L.append
    add(f"# Pilot report: {p.name}\n")
    add("Speculative decoding judged as a conditional service optimisation: three groups, "
        "flat / peak / burst traces set relative to G0's measured capacity, identical seeded "
        f"arrivals and prompts for every group, {p.repeats} repeats (95 % Student-t intervals "
        "over repeats, paired by seed), failed requests counted against their group.\n")
    add("## Verdicts per task group\n")
    add("| task group | verdict | crossover | flat: goodput Δ (G1 − best) | flat: median e2e gain "
        "| peak: goodput Δ | peak: median e2e gain | burst p99 ratio |")
    add("|---|---|---|---|---|---|---|---|")
    for tg, v in rep["verdicts"].items():
        if tg.startswith("_"):
            continue
        tr = v["traces"]

        def gd(role: str, key: str, tr: dict = tr) -> str:
            c = tr.get(role)
            if not c or not c[key]:
                return "–"
            m, lo, hi = c[key]
            return f"{m:+.3g} [{lo:+.2g}, {hi:+.2g}] vs {c['baseline']}"

        cross = (f"{v['crossover_load']:.2f}x G0 cap" + (f" = {v['crossover_rps']:.3g} req/s"
                                                         if v["crossover_rps"] else "")
                 if v["crossover_load"] else "–")
        p99 = tr.get("burst", {}).get("p99_ratio")
        add(f"| {tg} | **{v['decision']}** | {cross} | {gd('flat', 'goodput_diff')} | "
            f"{gd('flat', 'latency_gain')} s | {gd('peak', 'goodput_diff')} | "
            f"{gd('peak', 'latency_gain')} s | {_f(p99)} |")
    if "_note" in rep["verdicts"]:
        add(f"\n{rep['verdicts']['_note']}")
    add("\nThe rule: " + verdict.RULE + "\n")
    add("## Setup\n")
    for g in GROUPS:
        s = data.index["groups"][g]
        spec = p.groups[g]
        what = (f"`specd serve` {spec.serve.model_dump(exclude_defaults=True)}"
                if spec.serve else f"endpoint {spec.endpoint}")
        add(f"- **{g}** ({ROLES[g]}): {spec.description or ''} {what}; cold start "
            f"{_f(s.get('cold_start_s'), 3, ' s')} (measured apart from every trace)")
    starts = ("started together (`parallel_start`), so each cold start includes the others' "
              "load" if p.parallel_start else "started one after the other")
    if any(p.groups[g].serve is not None for g in GROUPS):
        add(f"- `serve` groups {starts}.")
    pre = data.index.get("preflight") or {}
    if pre:
        add("- Preflight (idle, one request of the longest output, best of two): " + "; ".join(
            f"{g} TTFT {_f(v['ttft_s'])} s, e2e {_f(v['e2e_s'])} s for {v['tokens']} tokens"
            for g, v in pre.items()))
    slo = p.slo
    add(f"- SLO per request: TTFT ≤ {slo.ttft_s:g} s, TPOT ≤ {slo.tpot_s:g} s, end to end ≤ "
        f"{slo.e2e_s:g} s; attainment target {slo.attainment:.0%}; client timeout "
        f"{slo.timeout_s:g} s. Goodput = requests meeting the SLO per second of the measured "
        "trace (warm-up excluded).")
    add("- Task groups: " + ", ".join(
        f"{n} (output {t.output.min}-{t.output.max} tokens)" for n, t in p.task_groups.items())
        + "; prompts: the engine benchmark's real prompts (English and Chinese), chat API, "
        "greedy.")
    for t in p.traces:
        info = data.index["traces"].get(t.name, {})
        reps = info.get("repeats", {})
        n = [v["arrivals"] for v in reps.values()]
        w = [v["warmup"] for v in reps.values()]
        shape = {"poisson": "Poisson", "gamma": f"gamma arrivals, shape {t.burstiness:g}",
                 "onoff": f"on/off {t.on_s:g} s / {t.off_s:g} s",
                 "replay": f"replay of {t.file}"}[t.kind]
        add(f"- Trace **{t.name}** ({t.role}): {shape}, "
            + (f"{t.load:g}x G0 capacity = " if t.load else "")
            + f"{_f(info.get('rate_rps'), 3)} req/s, {t.duration_s:g} s measured after "
            f"{t.warmup_s:g} s warm-up; arrivals per repeat {n} (warm-up {w}, excluded)")
    add(f"- Seed {p.seed}; repeats {p.repeats}; /metrics windows of {p.window_s:g} s.\n")
    add("## Capacity (highest Poisson rate meeting the SLO attainment)\n")
    add("| group | capacity (req/s) | first failing rate | steps (rate: attainment) |")
    add("|---|---|---|---|")
    for g in GROUPS:
        c = data.index["capacity"].get(g) or {}
        steps = ", ".join(f"{s['rate']:.3g}: {s['attainment']:.2f}" for s in c.get("steps", []))
        cap = _f(c.get("capacity_rps"))
        if c.get("capacity_rps") and c.get("first_failing_rps") is None:
            cap = f"≥ {cap} (no step failed)"
        add(f"| {g} | {cap} | {_f(c.get('first_failing_rps'))} | {steps} |")
    add("\n![capacity](capacity.png)\n")
    add("## Per trace and group (all task groups)\n")
    add("| trace | group | sent | warm-up excl. | attainment | goodput (req/s) | TTFT p50/p95/p99 (s)"
        " | TPOT p50/p95/p99 (ms) | e2e p50/p95/p99 (s) | timeouts | 429 | errors "
        "| decode share | peak RSS (MB) |")
    add("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    peak = rep["cost"]["peak_rss_mb"]
    for t, per in rep["requests"].items():
        for g in GROUPS:
            x = per[ALL][g]
            q = x["pooled"]
            tp = "/".join(_f(None if q[f"tpot_p{k}_s"] is None else 1000 * q[f"tpot_p{k}_s"])
                          for k in (50, 95, 99))
            add(f"| {t} | {g} | {q['requests']} | {q['warmup_excluded']} | "
                f"{_mci(x['attainment'])} | {_mci(x['goodput_rps'])} | "
                + "/".join(_f(q[f"ttft_p{k}_s"]) for k in (50, 95, 99)) + f" | {tp} | "
                + "/".join(_f(q[f"e2e_p{k}_s"]) for k in (50, 95, 99))
                + f" | {q['timeouts']} | {q['rejected_429']} | {q['errors']} | "
                f"{_f(q['decode_share'], 2)} | {_f(peak.get(g), 4)} |")
    add("\n![goodput](goodput.png)\n\n![e2e p99](e2e_p99.png)\n")
    add("## Per task group\n")
    add("| trace | task group | group | sent | attainment | goodput (req/s) | e2e p50 (s) | "
        "e2e p99 (s) | TTFT p95 (s) | TPOT p50 (ms) | failed |")
    add("|---|---|---|---|---|---|---|---|---|---|---|")
    for t, per in rep["requests"].items():
        for tg in p.task_groups:
            for g in GROUPS:
                x = per[tg][g]
                q = x["pooled"]
                failed = q["timeouts"] + q["rejected_429"] + q["errors"]
                add(f"| {t} | {tg} | {g} | {q['requests']} | {_mci(x['attainment'])} | "
                    f"{_mci(x['goodput_rps'])} | {_mci(x['e2e_p50_s'])} | {_mci(x['e2e_p99_s'])}"
                    f" | {_f(q['ttft_p95_s'])} | "
                    f"{_f(None if q['tpot_p50_s'] is None else 1000 * q['tpot_p50_s'])} | {failed} |")
    add("\n### By language (all task groups, pooled over repeats)\n")
    add("| trace | language | group | sent | attainment | e2e p50 (s) | e2e p99 (s) | TTFT p50 (s) |")
    add("|---|---|---|---|---|---|---|---|")
    for t, per in rep["requests"].items():
        for lang, by_group in per.get("_lang", {}).items():
            for g in GROUPS:
                q = by_group[g]
                add(f"| {t} | {lang} | {g} | {q['requests']} | {_f(q['attainment'])} | "
                    f"{_f(q['e2e_p50_s'])} | {_f(q['e2e_p99_s'])} | {_f(q['ttft_p50_s'])} |")
    add("\n## Round accounting (server /metrics, steady windows, summed over repeats)\n")
    add(f"Windows of {p.window_s:g} s; steady = after warm-up, without the last (drain) window. "
        "Decode time = draft + schedule + verify + commit phase time "
        "(`specd_round_phase_seconds_sum`); cost per committed token = decode time / committed "
        "(`specd_emitted_tokens_total`). Reconciled: the windows' sums equal the counters' "
        "last − first scrape in every repeat.\n")
    add("| trace | group | rounds | drafted | verified | committed | draft (s) | schedule (s) | "
        "verify (s) | ms / committed token | tokens / round | tau | reconciled |")
    add("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t, per in rep["windows"].items():
        for g in GROUPS:
            if g not in per:
                continue
            s = per[g]["steady"]
            rec = all(r["reconciled"] for r in per[g]["repeats"] if r["reconciled"] is not None)
            add(f"| {t} | {g} | {s['rounds']:.0f} | {s['drafted']:.0f} | {s['verified']:.0f} | "
                f"{s['committed']:.0f} | {s['draft_s']:.2f} | {s['schedule_s']:.3f} | "
                f"{s['verify_s']:.2f} | {_f(s['cost_per_token_ms'])} | "
                f"{_f(s['tokens_per_round'])} | {_f(s['tau'])} | {'yes' if rec else 'NO'} |")
    add("\n![windows](windows.png)\n")
    add("How to read the cost per token (the worked example the rule rests on): plain 40 ms a "
        "token; A 60 ms a round for 3 tokens = 20 ms; B 100 ms for 4 = 25 ms (more tokens a "
        "round lost); A at 1.2 tokens a round = 50 ms, slower than plain. And end to end only "
        "the decode part shrinks: 7 s of other work + 3 s of decoding, decoding halved = "
        f"10 s → 8.5 s, {verdict.end_to_end_speedup(10, 3, 2):.2f}x.")
    e2e = rep.get("end_to_end_view") or {}
    for t, v in e2e.items():
        add(f"- {t}: G1's decode cost per committed token is {_f(v['decode_speedup'], 3)}x "
            f"G0's faster; with the measured decode share of end-to-end time "
            f"{_f(v['decode_share'], 2)}, that bounds the end-to-end gain at "
            f"{_f(v['e2e_bound'], 3)}x.")
    add("\n## Business regression\n")
    reg = rep["regression"]
    add(f"Passed: **{'yes' if reg['ok'] else 'no'}**" + (f" ({reg['note']})" if reg["note"] else ""))
    add("\n| group | check | passed | failed |\n|---|---|---|---|")
    for g, checks in reg["counts"].items():
        for name, (good, bad) in checks.items():
            add(f"| {g} | {name} | {good} | {bad} |")
    tg_ = rep["trace_greedy"]
    for g in ("G1", "G2"):
        x = tg_[g]
        add(f"\nGreedy outputs on the traces, {g} against G0 (requests that finished on both): "
            f"{x['identical']} identical, {x['different']} different.")
        for e in x["examples"]:
            add(f"  - {e['trace']} repeat {e['repeat']} #{e['index']} ({e['task_group']}) at "
                f"char {e['char']}: G0 `{e['G0']!r}` / {g} `{e[g]!r}`")
    for d in tg_.get("traced", []):
        add(f"  - traced with the probe: {d['trace']} #{d['index']}: {d['outcome']} "
            f"{d.get('detail', '')}")
    add("\n## Cost view and the equal-resource accounting\n")
    c = rep["cost"]
    add("| group | max slots | capacity (req/s) | idle RSS (MB) | peak RSS (MB) | cold start (s) |")
    add("|---|---|---|---|---|---|")
    for g in GROUPS:
        add(f"| {g} | {_f(c['max_slots'][g])} | {_f(c['capacity_rps'][g])} | "
            f"{_f(c['idle_rss_mb'][g], 4)} | {_f(c['peak_rss_mb'].get(g), 4)} | "
            f"{_f(c['cold_start_s'][g], 3)} |")
    lines = []
    if "drafter_memory_mb" in c:
        lines.append(f"G1's idle RSS is {c['drafter_memory_mb']:+.0f} MB against G0's (the "
                     "drafter's weights and caches; RSS counts touched pages only, so a few MB "
                     "either way is noise)")
    if "memory_per_slot_mb" in c:
        lines.append(f"one KV slot costs {c['memory_per_slot_mb']:.1f} MB here (G2 − G0 idle RSS "
                     "over their slot difference)")
    if c.get("g1_draft_share_of_round_time") is not None:
        lines.append(f"drafting takes {c['g1_draft_share_of_round_time']:.1%} of G1's round "
                     "time; G2 never drafts, so that compute is plain decoding's there, on the "
                     "same cores and threads")
    if "capacity_lost_to_drafter" in c:
        open_ended = any((data.index["capacity"].get(g) or {}).get("first_failing_rps") is None
                         for g in ("G0", "G1"))
        lines.append(f"capacity lost to the drafter (1 − G1/G0 capacity): "
                     f"{c['capacity_lost_to_drafter']:+.0%}"
                     + (" (a lower bound only: the sweep found no failing rate for G0 or G1)"
                        if open_ended else ""))
    add("\n" + "; ".join(lines) + ".")
    if p.equal_resource_note:
        add(f"\nThe pilot file's accounting: {p.equal_resource_note}")
    return "\n".join(L) + "\n"


def end_to_end_view(windows: dict[str, Any], figures: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for t, per in windows.items():
        c0 = (per.get("G0") or {}).get("steady", {}).get("cost_per_token_ms")
        c1 = (per.get("G1") or {}).get("steady", {}).get("cost_per_token_ms")
        share = figures.get(t, {}).get(ALL, {}).get("G0", {}).get("pooled", {}).get("decode_share")
        if c0 and c1 and share is not None:
            s = c0 / c1
            out[t] = {"decode_speedup": s, "decode_share": share,
                      "e2e_bound": verdict.end_to_end_speedup(1.0, share, s)}
    return out


def build_report(folder: str | Path) -> dict[str, Any]:
    folder = Path(folder)
    data = Data(folder)
    figures = request_figures(data)
    windows = window_figures(data)
    regression = regression_summary(data)
    rep: dict[str, Any] = {
        "pilot": data.index["pilot"], "groups": data.index["groups"],
        "capacity": data.index["capacity"], "preflight": data.index.get("preflight"),
        "requests": figures, "windows": windows, "regression": regression,
        "trace_greedy": trace_greedy(data), "cost": cost_view(data, windows),
        "end_to_end_view": end_to_end_view(windows, figures), "rule": verdict.RULE}
    rep["verdicts"] = verdicts(data, figures, regression)
    rep["plots"] = plots(data, figures, windows) if figures else []
    (folder / "report.json").write_text(json.dumps(rep, indent=1, ensure_ascii=False,
                                                   default=str))
    (folder / "report.md").write_text(markdown(data, rep), encoding="utf-8")
    return rep
