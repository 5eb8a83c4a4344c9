"""`capsbench run ... --dry-run`: a plan's sections, units, checkpoints to train and minutes, priced by the cost model
for the run's device (device=cuda on a machine without one: the GPU named), before anything runs or is written."""

from __future__ import annotations

from typing import Any

from capsbench.run.cost_model import device_key, plan_work, price, rates
from capsbench.run.plan import Plan
from capsbench.run.store import UnitStore


def describe(plan: Plan, gpu: str | None) -> dict[str, Any]:
    """The plan as data: per section its suite, budget, models, seeds, units still to run (a finished unit in the
    unit store is not run again), checkpoints to train and its estimate; the total on the device, and its basis."""
    cfg = plan.cfg
    device = device_key(cfg.device, gpu)
    table = rates(cfg.cache_dir)
    store = UnitStore(cfg.output_dir)
    sections, todo_all = [], []
    for section in plan.sections:
        todo = [u for u in section.units if cfg.get("remeasure") or store.load(u) is None]
        work = plan_work(todo)
        estimate = price(todo, work, device, table)
        todo_all += todo
        sections.append({
            "section": section.key,
            "suite": section.cfg.suite,
            "budget": section.cfg.budget,
            "dataset": section.cfg.dataset,
            "models": list(section.cfg.models),
            "seeds": list(section.cfg.seeds),
            "units": len(section.units),
            "to_run": len(todo),
            "to_train": sum(1 for w in work.values() if w.train > 0),
            "minutes": estimate.minutes,
            "why": estimate.why,
        })
    total = price(todo_all, plan_work(todo_all), device, table)
    return {"device": total.device, "sections": sections, "minutes": total.minutes, "estimate": total.words(),
            "basis": total.basis, "why": total.why, "notes": [line for _, line in plan.notes]}


def lines(described: dict[str, Any]) -> list[str]:
    """The description as text, one line per section and a total."""
    out = list(described["notes"])
    for s in described["sections"]:
        minutes = "unknown" if s["minutes"] is None else f"{s['minutes']:.1f} min"
        out.append(f"{s['section']}: {s['suite']} at budget={s['budget']} on {s['dataset']}, models "
                   f"{', '.join(s['models'])}, seeds {s['seeds']}: {s['to_run']} of {s['units']} units to run, "
                   f"{s['to_train']} checkpoints to train; {minutes}" + (f" ({s['why']})" if s["why"] else ""))
    out.append(f"dry run: {described['estimate']}, {described['basis'] or 'on ' + described['device']}"
               + (f" ({described['why']})" if described["why"] else "") + "; nothing was run or written")
    return out
