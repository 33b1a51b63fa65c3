"""The one decision procedure: screen, confirm, accept. Everything that is chosen is chosen here.

- screen.py: right after a build, the candidate paired with eager on the device that built it; ranks and
  prunes (shortlist), so that only the finalists are held.
- session.py: the confirm session's numbers (eager, the A/A control and each finalist, paired by round on
  one device at one moment), as plain data.
- rule.py: the accept rule (superiority over the call mix, non-inferiority at every batch size, at
  confidence 1 - alpha/K) and the A/A check.
- procedure.py: shortlist, confirm, decide: the procedure end to end.
- choose.py: the verdict of one session: the winner, or a batch-size dispatch, or eager and why.
- objective.py: what the winner maximizes among the accepted (speedup, latency, throughput within a latency
  budget): a strategy's policy, never a rule.
- verdict.py: the typed verdict, plain data that crosses into the report and the checkpoint.

Strategies, deployment and the kernel forge call this package; nothing else decides.
"""

from aitune_ray.decision.choose import decide
from aitune_ray.decision.objective import BUDGET, LATENCY, SPEEDUP, Objective
from aitune_ray.decision.procedure import choose
from aitune_ray.decision.rule import Rule, judge
from aitune_ray.decision.screen import SCREEN_ROUNDS, screen_interval, shortlist
from aitune_ray.decision.session import Session
from aitune_ray.decision.verdict import (CONFIRM_FAILED, DISPATCH, FASTER, HOST_UNFIT, INCONCLUSIVE, NO_CANDIDATE,
                                         NOT_FASTER, OVER_BUDGET, SLOWER, VALIDATION_OFF, Judgement, Verdict)

__all__ = ["choose", "decide", "Objective", "SPEEDUP", "LATENCY", "BUDGET", "OVER_BUDGET", "Rule", "judge", "SCREEN_ROUNDS", "screen_interval", "shortlist", "Session", "Judgement",
           "Verdict", "CONFIRM_FAILED", "DISPATCH", "FASTER", "HOST_UNFIT", "INCONCLUSIVE", "NO_CANDIDATE",
           "NOT_FASTER", "SLOWER", "VALIDATION_OFF"]
