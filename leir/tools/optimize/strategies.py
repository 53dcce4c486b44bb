"""The search strategies: greedy, beam and MCTS over the ranked, verified
candidates (``leir.tools.optimize`` explains each)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from leir.tools.measuring import MIN_GAIN, Paired, measure_pair
from leir.tools.optimize.states import CONFIRM_COST, Budget, OnKept, State, child_states, tell, verify_state
from leir.tools.ranking import Ranked, Ranker, pick, rank

#: Measured candidates per round when the budget allows more (greedy, beam).
MAX_PER_ROUND = 8
#: Confirmations tried per greedy round before it moves down the ranking: a
#: second lucky-looking candidate of one round is most often lucky too.
MAX_CONFIRMATIONS_PER_ROUND = 2
#: Children measured per MCTS expansion at most.
MAX_PER_EXPANSION = 4
#: UCT's exploration constant (sqrt(2): the textbook value for rewards in [0, 1]-ish ranges).
UCT_C = math.sqrt(2)


def _per_round(meter: Budget, rounds_left: int, reserve: int = 0) -> int:
    """Candidates to measure this round: the budget left, less ``reserve``,
    shared among the rounds left."""
    return max(1, min(MAX_PER_ROUND, (meter.left - reserve) // max(1, rounds_left)))


def _greedy(start: State, steps: int, meter: Budget, rng: random.Random, target: str, ranker: Ranker | None = None,
            on_kept: OnKept | None = None, **_) -> tuple[State, str]:
    """Each round measures the next best-ranked untried steps of the current
    program; the fastest verified one that looks ``MIN_GAIN`` faster is
    re-timed against the current program turn about (``Budget.confirm``) and
    kept only if the gain holds. A round that keeps nothing (the round is not
    a step) tries the next ones down the ranking, until the budget or the
    candidates run out."""
    current, taken = start, 0
    tried: set[str] = set()
    while taken < steps:
        nothing = ("no measured candidate improved" if not meter.unconfirmed
                   else "no measured candidate's gain held under paired re-timing")
        if meter.left < 1 + CONFIRM_COST:  # one candidate and its confirmation
            return current, "budget spent" if taken else f"budget spent; {nothing}"
        picks = pick(rank(current.analysis, target, ranker), _per_round(meter, steps - taken, CONFIRM_COST), rng, tried)
        if not picks:
            return current, nothing if tried else "no candidate applies"
        tried.update(r.step.key for r in picks)
        children = [c for c, _ in child_states(current, picks)]
        meter.measure(children)
        improving = sorted((c for c in children if c.ms is not None and c.ms < current.ms * (1 - MIN_GAIN)),
                           key=lambda c: c.ms)
        kept, confirmations = None, 0
        for c in improving:
            if confirmations == MAX_CONFIRMATIONS_PER_ROUND:
                # Not re-timed this round: offered again next round, where its
                # screening figure is remembered (it costs nothing again).
                tried.discard(c.trace[-1][0].key)
                continue
            if not verify_state(c):
                continue
            paired = meter.confirm(current, c)
            if paired is None:
                return current, "budget spent before a candidate's gain could be confirmed"
            confirmations += 1
            if paired.confirms():
                kept = c
                break
        if kept is not None:
            # From now on the current program's latency is the one the
            # comparison measured for it, not its screening figure.
            kept.ms = kept.paired.after_ms
            tell(on_kept, kept, target)
            current, taken, tried = kept, taken + 1, set()
    return current, f"{steps} steps taken"


def confirm_final(start: State, best: State, meter: Budget, reason: str) -> tuple[State, str, Paired | None]:
    """Beam and MCTS keep slower intermediate programs on purpose; what they
    return must still be faster than the start under paired re-timing."""
    if best is start:
        return start, reason, None
    paired = measure_pair(meter.measurer, start.analysis, best.analysis) if meter.left >= CONFIRM_COST else None
    if paired is None:
        return start, "budget spent before the best program's gain could be confirmed", None
    meter.confirmations += 1
    if not paired.confirms():
        meter.unconfirmed += 1
        return start, "the best program's gain did not hold under paired re-timing", None
    return best, reason, paired


def _beam(start: State, steps: int, meter: Budget, rng: random.Random, target: str, beam_width: int = 3,
          ranker: Ranker | None = None, **_) -> tuple[State, str]:
    beam = [start]
    best = start
    seen = {start.key}
    for n in range(steps):
        if meter.left <= 0:
            return best, "budget spent"
        per_state = max(1, _per_round(meter, steps - n) // len(beam))
        children = []
        for s in beam:
            for c, _ in child_states(s, pick(rank(s.analysis, target, ranker), per_state, rng)):
                if c.key not in seen:
                    seen.add(c.key)
                    children.append(c)
        meter.measure(children)
        timed = sorted((c for c in children if c.ms is not None), key=lambda c: c.ms)
        next_beam = []
        for c in timed:
            if len(next_beam) == beam_width:
                break
            if verify_state(c):
                next_beam.append(c)
        if not next_beam:
            return best, "no candidate applies" if not children else "no measured candidate verified"
        beam = next_beam
        if beam[0].ms < best.ms * (1 - MIN_GAIN):
            best = beam[0]
    return best, f"{steps} rounds searched"


@dataclass
class _Node:
    state: State
    depth: int
    untried: list[Ranked] | None = None
    children: list["_Node"] = field(default_factory=list)
    visits: int = 0
    reward: float = 0.0


def _mcts(start: State, steps: int, meter: Budget, rng: random.Random, target: str, iterations: int = 10,
          ranker: Ranker | None = None, **_) -> tuple[State, str]:
    root = _Node(start, 0)
    nodes = [root]
    per_expansion = max(1, min(MAX_PER_EXPANSION, meter.left // iterations))
    for _ in range(iterations):
        if meter.left <= 0:
            break
        # Select: descend by UCT through fully expanded nodes.
        node, path = root, [root]
        while True:
            if node.untried is None:
                node.untried = pick(rank(node.state.analysis, target, ranker), MAX_PER_ROUND, rng) if node.depth < steps else []
            if node.untried or not node.children:
                break
            node = max(node.children, key=lambda c: c.reward / c.visits
                       + UCT_C * math.sqrt(math.log(node.visits + 1) / c.visits))
            path.append(node)
        if not node.untried:
            reward = start.ms / node.state.ms
        else:
            # Expand: measure the next few untried steps; keep the verified ones.
            batch, node.untried = node.untried[:per_expansion], node.untried[per_expansion:]
            children = [c for c, _ in child_states(node.state, batch)]
            meter.measure(children)
            reward = 0.0
            for c in children:
                if c.ms is None or not verify_state(c):
                    continue
                child = _Node(c, node.depth + 1, visits=1, reward=start.ms / c.ms)
                node.children.append(child)
                nodes.append(child)
                reward = max(reward, child.reward)
        for n in path:
            n.visits += 1
            n.reward += reward
    best = min((n.state for n in nodes if n.state.ms is not None), key=lambda s: s.ms)
    if best.ms >= start.ms * (1 - MIN_GAIN):
        return start, "no measured candidate improved"
    return best, f"{iterations} iterations searched" if meter.left > 0 else "budget spent"


#: Each strategy's search: ``(start, steps, meter, rng, target, **options) -> (best, stop reason)``
#: (``leir.tools.optimize.SEARCHES`` adds ``plans``, which polishes with ``greedy``).
SEARCHES = {"greedy": _greedy, "beam": _beam, "mcts": _mcts}
