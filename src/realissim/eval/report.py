"""Evaluation figures and a self-contained HTML report.

`plot_episodes(results, out)` draws, from a list of `EpisodeResult`s, the share of episodes solved by each
time and the coverage over time (median and quartiles) as `curves.png`, and the agreement of the policy's own
progress claim with the ground truth as `agreement.png`. `build_html(folder)` turns a report folder (what
`realissim eval offline|online|sweep --out` writes: results.json or sweep.json, episodes.csv, PNGs) into one
`report.html` with the figures embedded, so it can be mailed or archived alone.
"""

from __future__ import annotations

import base64
import csv
import html
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from realissim.eval.episode import EpisodeResult
from realissim.eval.stats import agreement


def plot_episodes(results: Sequence[EpisodeResult], out: Path, progress_threshold: float = 0.9) -> list[Path]:
    """`out`/curves.png and `out`/agreement.png for `results` (see the module docstring); the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    done = [r for r in results if r.times]
    if not done:
        return []
    horizon = max(r.times[-1] for r in done)
    grid = np.linspace(0.0, horizon, 200)
    solved = np.array([np.mean([r.success and r.success_time <= t for r in done]) for t in grid])
    cov = np.array([np.interp(grid, r.times, r.coverage, right=r.coverage[-1]) for r in done])
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=110)
    a.plot(grid, 100 * solved)
    a.set_xlabel("time, s")
    a.set_ylabel("episodes solved, %")
    a.set_ylim(0, 100)
    a.grid(alpha=0.3)
    q25, q50, q75 = np.percentile(cov, [25, 50, 75], axis=0)
    b.fill_between(grid, q25, q75, alpha=0.3, label="quartiles")
    b.plot(grid, q50, label="median")
    b.axhline(0.95, color="k", lw=0.8, ls="--", label="success")
    b.set_xlabel("time, s")
    b.set_ylabel("coverage")
    b.set_ylim(0, 1)
    b.grid(alpha=0.3)
    b.legend(loc="lower right")
    fig.tight_layout()
    curves = out / "curves.png"
    fig.savefig(curves)
    plt.close(fig)

    claimed = [bool(r.progress) and max(r.progress) > progress_threshold for r in done]
    agree = agreement([r.success for r in done], claimed)
    fig, ax = plt.subplots(figsize=(3.6, 3.2), dpi=110)
    m = np.asarray(agree.matrix)
    ax.imshow(m, cmap="Blues")
    for i in range(2):
        for j in range(2):
            ax.text(j, i, str(m[i, j]), ha="center", va="center", fontsize=14)
    ax.set_xticks([0, 1], ["claims failure", "claims success"])
    ax.set_yticks([0, 1], ["failed", "succeeded"])
    ax.set_title(f"progress > {progress_threshold} vs truth, κ = {agree.kappa:.2f}", fontsize=9)
    fig.tight_layout()
    matrix = out / "agreement.png"
    fig.savefig(matrix)
    plt.close(fig)
    return [curves, matrix]


def _value(v: object) -> str:
    if isinstance(v, float):
        return "–" if math.isnan(v) else f"{v:.4g}"
    if isinstance(v, list) and all(isinstance(x, float) for x in v):
        return "[" + ", ".join(f"{x:.3g}" for x in v) + "]"
    return html.escape(str(v))


def build_html(folder: Path, title: str | None = None, max_rows: int = 500) -> Path:
    """`folder`/report.html: the summary (results.json, or sweep.json's rows), every PNG embedded, and the
    per-episode table (episodes.csv, at most `max_rows` rows). ValueError naming the folder if it holds no
    report."""
    folder = Path(folder)
    results, sweep = folder / "results.json", folder / "sweep.json"
    if not results.exists() and not sweep.exists():
        raise ValueError(f"{folder}: no results.json or sweep.json (write one with realissim eval ... --out)")
    parts = [f"<h1>{html.escape(title or folder.name)}</h1>"]
    if results.exists():
        summary = json.loads(results.read_text())
        rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{_value(v)}</td></tr>" for k, v in summary.items())
        parts.append(f"<h2>Summary</h2><table>{rows}</table>")
    if sweep.exists():
        data = json.loads(sweep.read_text())
        head = "<tr><th>step</th><th>success</th><th>95 % CI</th><th>progress &gt; 0.9</th><th>coverage</th></tr>"
        body = "".join(
            f"<tr{' class=chosen' if r['step'] == data['chosen']['step'] else ''}><td>{r['step']}</td>"
            f"<td>{r['successes']}/{r['episodes']}</td><td>{_value(r['success_ci95'])}</td>"
            f"<td>{_value(r['progress_success'])}</td><td>{_value(r['mean_final_coverage'])}</td></tr>"
            for r in data["rows"]
        )
        parts.append(f"<h2>Checkpoints</h2><p>chosen: {html.escape(data['chosen']['checkpoint'])}</p>")
        parts.append(f"<table>{head}{body}</table>")
    for png in sorted(folder.glob("*.png")):
        data64 = base64.b64encode(png.read_bytes()).decode()
        parts.append(f"<h3>{html.escape(png.stem)}</h3><img src='data:image/png;base64,{data64}'>")
    episodes = folder / "episodes.csv"
    if episodes.exists():
        with open(episodes, newline="") as f:
            reader = list(csv.reader(f))
        if reader:
            head = "".join(f"<th>{html.escape(c)}</th>" for c in reader[0])
            body = "".join(
                "<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in reader[1 : max_rows + 1]
            )
            parts.append(f"<h2>Episodes ({len(reader) - 1})</h2><table>{head}{body}</table>")
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}tr.chosen{background:#ffe9a8}"
    )
    page = f"<!doctype html><html><head><meta charset='utf-8'><style>{style}</style></head><body>"
    page += "".join(parts) + "</body></html>"
    path = folder / "report.html"
    path.write_text(page)
    return path


def _cell(text: str) -> str:
    try:
        v = float(text)
    except ValueError:
        return html.escape(text)
    return "–" if math.isnan(v) else (f"{v:.4g}" if not v.is_integer() else str(int(v)))


def paired_outcomes(offline_csv: Path, online_csv: Path) -> dict[str, float]:
    """Offline against online success start by start (trial 0 online, episodes that ended in error left out):
    counts of both solved, offline only, online only, neither, and the share that agree."""
    import csv

    with open(offline_csv) as f:
        offline = [row["success"] == "True" for row in csv.DictReader(f)]
    with open(online_csv) as f:
        online = {int(r["start"]): r["success"] == "True" for r in csv.DictReader(f) if r["trial"] == "0"
                  and not r["error"]}  # fmt: skip
    pairs = [(offline[i], ok) for i, ok in sorted(online.items()) if i < len(offline)]
    counts = {
        "both": sum(a and b for a, b in pairs),
        "offline_only": sum(a and not b for a, b in pairs),
        "online_only": sum(b and not a for a, b in pairs),
        "neither": sum(not (a or b) for a, b in pairs),
    }
    return counts | {"starts": len(pairs), "agree": (counts["both"] + counts["neither"]) / len(pairs) if pairs else 0.0}
