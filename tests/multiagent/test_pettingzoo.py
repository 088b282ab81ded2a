"""The native multi-agent API on real PettingZoo envs: MultiAgentVectorEnv against a plain loop
over the parallel envs (tests/helpers/multiagent.py), for MPE2's simple_spread_v3, pistonball_v6 and
knights_archers_zombies_v11 (whose agents die), with 1, 2 and 3 workers, fork and spawn."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

pytest.importorskip("pettingzoo", reason="the PettingZoo tests need pettingzoo: pip install -e '.[test]'")
pytest.importorskip("mpe2", reason="simple_spread_v3 needs mpe2: pip install -e '.[test]'")
pytest.importorskip("pymunk", reason="the butterfly envs need pymunk: pip install -e '.[test]'")

from tests.helpers.multiagent import kaz, pistonball, simple_spread  # noqa: E402
from tests.multiagent.test_vector_env import rollout_matches_steps, run_native  # noqa: E402
from vecenv.errors import ArgumentTypeError  # noqa: E402
from vecenv.multiagent import MultiAgentVectorEnv  # noqa: E402

NEXT, SAME, DISABLED = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED

#: (env, copies, steps): short runs that still end episodes (and, for KAZ, kill agents).
ENVS = {
    "simple_spread": (functools.partial(simple_spread, max_cycles=20), 4, 50),
    "pistonball": (functools.partial(pistonball, max_cycles=12), 3, 30),
    "kaz": (kaz, 3, 140),
}


def case(env: str, mode: AutoresetMode, workers: int, context: str = "fork", slow: bool = False) -> Any:
    return pytest.param(
        env,
        mode,
        workers,
        context,
        id=f"{env}-{mode.value}-w{workers}-{context}",
        marks=[pytest.mark.slow] if slow else [],
    )


CASES = [
    case("simple_spread", NEXT, 1),
    case("simple_spread", SAME, 2),
    case("simple_spread", DISABLED, 3),
    case("simple_spread", NEXT, 2, "spawn"),
    case("pistonball", SAME, 1),
    case("pistonball", NEXT, 2),
    case("pistonball", DISABLED, 3, slow=True),
    case("pistonball", SAME, 2, "spawn", slow=True),
    case("kaz", NEXT, 1),
    case("kaz", SAME, 2),
    case("kaz", DISABLED, 2),
    case("kaz", NEXT, 3),
    case("kaz", SAME, 3, "spawn"),
    case("simple_spread", SAME, 3, "spawn", slow=True),
    case("kaz", DISABLED, 1, "spawn", slow=True),
]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("env", "mode", "workers", "context"), CASES)
def test_matches_plain_loop(env: str, mode: AutoresetMode, workers: int, context: str) -> None:
    make, copies, steps = ENVS[env]
    seen = run_native([make] * copies, mode, steps, seed=11, num_workers=workers, context=context)
    assert seen["copy_ends"] >= copies, seen
    if env == "kaz":
        assert seen["inactive_rows"] > 0, "no agent died: the run does not test agent death"


def test_kaz_agent_death_needs_no_wrapper() -> None:
    """Dead agents' rows: zero observation, reward 0, terminated, inactive, until the copy resets."""
    with MultiAgentVectorEnv([kaz] * 2, num_workers=2, context="fork") as envs:
        envs.reset(seed=5)
        space = envs.action_space
        space.seed(5)
        dead_steps = 0
        for _ in range(150):
            obs, rewards, terms, _, infos = envs.step(space.sample())
            dead = ~infos["active"]
            assert np.array_equal(dead, ~envs.active)
            if dead.any():
                dead_steps += 1
                assert not obs[dead].any() and (rewards[dead] == 0).all() and terms[dead].all()
        assert dead_steps > 0


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("workers", "context"), [(1, "fork"), (3, "fork"), (2, "spawn")], ids=["w1", "w3", "w2-spawn"])
def test_kaz_rollout_gives_the_steps_of_its_actions(workers: int, context: str) -> None:
    """A rollout in the workers of knights-archers-zombies, whose agents die: the steps that
    ``step`` gives for the rollout's actions, row for row."""
    inactive = rollout_matches_steps([kaz] * 3, 140, "random", seed=5, num_workers=workers, context=context)
    assert inactive > 0, "no agent died: the run does not test agent death"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 1], ids=lambda w: f"w{w}")
def test_an_aec_env_is_refused_saying_how_to_make_a_parallel_one(num_workers: int) -> None:
    """``simple_spread_v3.env`` (AEC) where ``parallel_env`` was meant: refused when the copies
    are built, naming both ways to a parallel env, not at the first reset with "cannot unpack
    non-iterable NoneType object"."""
    from mpe2 import simple_spread_v3

    make = functools.partial(simple_spread_v3.env, max_cycles=5)
    with pytest.raises(ArgumentTypeError, match=r"got an AEC env .*parallel_env\(\).*aec_to_parallel"):
        MultiAgentVectorEnv([make] * 2, num_workers=num_workers, context="fork")
