"""`identify`: from an online dataset to a twin-parameter file and its report (what `realissim sysid` runs).

Writes OUT/sysid.json (`twin.identified.IdentifiedDynamics`: what `collect --randomize-from` and the twin read),
OUT/report.md (estimates with intervals, the fit before and after) and OUT/residuals.png (the residual of every
replayed window before and after, against time).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from realissim.sysid.objects import ObjectFit, ObjectFitConfig, fit_objects
from realissim.sysid.records import Recording, SysidError, load_recordings
from realissim.twin.identified import IdentifiedDynamics, IdentifiedObject

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SysidConfig:
    """What `realissim sysid` identifies, and how."""

    objects: ObjectFitConfig = field(default_factory=ObjectFitConfig)
    """The objects' dynamics fit."""
    episodes: tuple[int, ...] | None = None
    """Episodes of the dataset to use, by index (None: all)."""
    min_seconds: float = 2.0
    """Shortest usable episode, s (a shorter one is refused by name)."""


def identify(dataset: str | Path, out: str | Path, config: SysidConfig = SysidConfig()) -> IdentifiedDynamics:
    """Identify from the online episodes of `dataset`, write OUT/sysid.json, OUT/report.md and OUT/residuals.png, and
    return the identified dynamics. Raises `SysidError` naming the problem (no online episodes, an episode too short,
    too still to identify, an estimate at its bound) before anything is written."""
    scene, recordings = load_recordings(dataset, None if config.episodes is None else list(config.episodes))
    short = [r for r in recordings if r.duration < config.min_seconds]
    if short:
        raise SysidError(
            f"{dataset}: episode {short[0].episode} lasts {short[0].duration:.2f} s, under the "
            f"{config.min_seconds:g} s identification needs"
        )
    fit = fit_objects(scene, recordings, config.objects)
    objects = tuple(
        IdentifiedObject(
            e.name,
            e.friction_scale,
            _half(e.friction_ci),
            e.mass_scale if config.objects.fit_mass else 1.0,
            _half(e.mass_ci) if config.objects.fit_mass else None,
            e.com_offset,
            e.com_ci if all(math.isfinite(c) for c in e.com_ci) else None,
        )
        for e in fit.objects
    )
    about = {
        "dataset": str(dataset),
        "episodes": [r.episode for r in recordings],
        "seconds_of_data": sum(r.duration for r in recordings),
        "windows": fit.windows,
        "rms_before_sigma": fit.rms_before,
        "rms_after_sigma": fit.rms_after,
        "sigma_m": config.objects.sigma,
        "evaluations": fit.evaluations,
        "sysid_s": fit.seconds,
        "windows_kind": config.objects.windows,
        "mass": "fitted" if config.objects.fit_mass else "not identified (pushing kinematics do not determine it)",
        "com": "fitted" if config.objects.fit_com else "not identified",
    }
    result = IdentifiedDynamics(objects, about)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    result.save(out_dir / "sysid.json")
    (out_dir / "report.md").write_text(report_text(result, fit, recordings))
    _plot(fit, out_dir / "residuals.png")
    log.info("wrote %s", out_dir / "sysid.json")
    return result


def _half(v: float) -> float | None:
    """A half-width for the file: None where the data did not bound it."""
    return float(v) if math.isfinite(v) else None


def report_text(result: IdentifiedDynamics, fit: ObjectFit, recordings: list[Recording]) -> str:
    """The markdown report: data used, each estimate ± its 95 % half-width, the fit before and after."""
    f = result.fit
    lines = [
        "# System identification",
        "",
        f"Data: {f['dataset']}, episodes {f['episodes']} ({f['seconds_of_data']:.1f} s), {fit.windows} replayed "
        f"windows; fit in {fit.seconds:.1f} s ({fit.evaluations} evaluations).",
        f"Residual RMS (units of σ = {1e3 * f['sigma_m']:.1f} mm): {fit.rms_before:.2f} at the described dynamics → "
        f"{fit.rms_after:.2f} identified.",
        "",
        "| object | friction × | mass × | centre of mass offset (mm, body x, y) | windows |",
        "|---|---|---|---|---|",
    ]
    for o, e in zip(result.objects, fit.objects):
        ma = "not identified" if math.isnan(e.mass_ci) else _pm(o.mass_scale, e.mass_ci, "{:.3f}")
        fr = _pm(o.friction_scale, e.friction_ci, "{:.3f}")
        if all(math.isnan(c) for c in e.com_ci):
            com = "not identified"
        else:
            com = ", ".join(_pm(1e3 * v, 1e3 * c, "{:.1f}") for v, c in zip(o.com_offset[:2], e.com_ci))
        lines.append(f"| {o.name} | {fr} | {ma} | {com} | {e.windows} |")
    lines += [
        "",
        "Intervals: 95 %, from a wide-step Jacobian at the optimum, assuming independent residuals (consecutive frames "
        "are not): a lower bound of the uncertainty. Mass: pushing with a position-controlled arm prescribes the "
        "motion whatever the mass, so the object's replayed motion does not determine it.",
        "",
    ]
    return "\n".join(lines)


def _pm(value: float, half: float | None, fmt: str) -> str:
    if half is None or not math.isfinite(half):
        return f"{fmt.format(value)} (unbounded)"
    return f"{fmt.format(value)} ± {fmt.format(half)}"


def _plot(fit: ObjectFit, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2))
    for r, label in ((fit.residual_before, "described dynamics"), (fit.residual_after, "identified")):
        ax.plot(np.abs(r), lw=0.6, label=f"{label} (RMS {np.sqrt(np.mean(r * r)):.2f})")
    ax.set_xlabel("residual index (windows in order; x, y then yaw per frame)")
    ax.set_ylabel("|residual| / σ")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
