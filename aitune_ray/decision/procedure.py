"""The procedure, end to end: shortlist the screened candidates, confirm the finalists in one session,
decide on that session. Strategies call it (their policy is which candidates, in what order, when to stop);
tests call it with simulated numbers."""

from __future__ import annotations

import logging
from typing import Callable

from aitune_ray.decision.choose import decide
from aitune_ray.decision.objective import Objective
from aitune_ray.decision.rule import Rule
from aitune_ray.decision.screen import MAX_FINALISTS, shortlist
from aitune_ray.decision.session import Session
from aitune_ray.decision.verdict import Verdict

logger = logging.getLogger(__name__)


def choose(screens: dict[str, dict | None], confirm: Callable[[list[str]], Session], mix: dict[int, int],
           rule: Rule, *, max_finalists: int = MAX_FINALISTS, dispatch: bool = False,
           order: list[str] | None = None, family: int = 0, objective: Objective | None = None) -> Verdict:
    """The verdict on the candidates whose screening numbers are screens (key -> BuildResult.screen, in
    the strategy's order). confirm(finalists) runs their confirm session; one that raises is a failed
    session (eager is kept, and the verdict says why). family, objective: as in decide (screening ranks on
    objective.screen_mix(mix))."""
    objective = objective or Objective()
    finalists, pruned, screened = shortlist(screens, objective.screen_mix(mix), max_finalists, order,
                                            prune_slower=rule.enabled)
    session = None
    if finalists:
        try:
            session = confirm(finalists)
        except Exception as exc:  # noqa: BLE001 - a failed session is a verdict, never a decision on other numbers
            logger.warning("the confirm session failed: %s: %s", type(exc).__name__, exc)
            session = Session.failure(f"{type(exc).__name__}: {exc}")
    return decide(session, finalists, mix, rule, dispatch=dispatch, screened=screened, pruned=pruned,
                  family=family, objective=objective)
