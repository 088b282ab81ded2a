"""``vecenv.wire.weights``: new weights pickled apart from their arrays' bytes, and the pickle of
the last layout reused for weights laid out alike. No process: weights in, weights out."""

from __future__ import annotations

import pickle
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest

import vecenv.wire.weights as weights_module
from vecenv.wire.weights import ApartPickler

pytestmark = pytest.mark.timeout(30)


def loaded(apart: tuple[bytes, list[memoryview]] | None) -> Any:
    """The weights as a worker loads them: the header over copies of the buffers' bytes."""
    assert apart is not None
    header, buffers = apart
    return pickle.loads(header, buffers=[bytearray(b) for b in buffers])


def assert_same(got: Any, want: Any) -> None:
    assert type(got) is dict and list(got) == list(want)
    for key, value in want.items():
        value = np.asarray(value)
        assert type(got[key]) is type(want[key]) or hasattr(got[key], "numpy"), key
        array = np.asarray(got[key])
        assert array.dtype == value.dtype and array.shape == value.shape, key
        np.testing.assert_array_equal(array, value)
        assert array.flags.writeable == value.flags.writeable, key


def mlp(scale: float = 1.0) -> dict[str, np.ndarray]:
    return {
        "layer0.weight": np.full((4, 8), scale, np.float32),
        "layer0.bias": np.arange(8, dtype=np.float32) * scale,
        "layer1.weight": np.full((8, 3), -scale, np.float32),
        "steps": np.array([int(scale)], np.int64),
    }


def count_pickles(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    made: list[Any] = []
    original = weights_module.pickle_apart

    def counted(value: Any) -> Any:
        made.append(value)
        return original(value)

    monkeypatch.setattr(weights_module, "pickle_apart", counted)
    return made


def test_weights_laid_out_as_the_last_reuse_its_pickle_and_carry_their_own_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = count_pickles(monkeypatch)
    apart = ApartPickler()
    first = apart(mlp(1.0))
    assert_same(loaded(first), mlp(1.0))
    for scale in (2.0, -3.0, 0.5):
        again = apart(mlp(scale))
        assert again is not None and first is not None and again[0] is first[0], "the kept header"
        assert_same(loaded(again), mlp(scale))
    assert len(made) == 1, "pickled once for four versions"


def changed(kind: str) -> dict[str, Any]:
    w: dict[str, Any] = mlp(5.0)
    if kind == "shape":
        w["layer0.bias"] = np.zeros(9, np.float32)
    elif kind == "dtype":
        w["layer0.bias"] = w["layer0.bias"].astype(np.float64)
    elif kind == "byte order":
        w["layer0.bias"] = w["layer0.bias"].astype(">f4")
    elif kind == "key":
        w["layer0.b"] = w.pop("layer0.bias")
    elif kind == "order":
        w = dict(reversed(list(w.items())))
    elif kind == "one more":
        w["extra"] = np.ones(2, np.float32)
    elif kind == "read-only":
        w["layer0.bias"].flags.writeable = False
    elif kind == "0-d":
        w["steps"] = np.array(7, np.int64)
    elif kind == "empty":
        w["layer1.weight"] = np.zeros((0, 3), np.float32)
    return w


@pytest.mark.parametrize(
    "kind", ["shape", "dtype", "byte order", "key", "order", "one more", "read-only", "0-d", "empty"]
)
def test_any_change_of_layout_pickles_again_and_is_kept_in_turn(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    made = count_pickles(monkeypatch)
    apart = ApartPickler()
    apart(mlp(1.0))
    assert_same(loaded(apart(changed(kind))), changed(kind))
    assert len(made) == 2, "the new layout pickled"
    assert_same(loaded(apart(changed(kind))), changed(kind))
    assert len(made) == 2, "and kept for the next version"
    assert_same(loaded(apart(mlp(2.0))), mlp(2.0))
    assert len(made) == 3, "the old layout is pickled again"


@pytest.mark.parametrize(
    "weights",
    [
        pytest.param({"w": np.ones((4, 3), np.float32)[:, :2]}, id="not contiguous"),
        pytest.param({"w": np.array([1, "a"], object)}, id="objects"),
        pytest.param({"w": np.zeros(2, [("a", np.float32)])}, id="structured"),
        pytest.param({"w": np.ones(2), "name": "w"}, id="not an array"),
        pytest.param({"w": {"nested": np.ones(2)}}, id="nested"),
        pytest.param({1: np.ones(2)}, id="not a str key"),
        pytest.param({"w": np.zeros(3, np.dtype("f4", metadata={"unit": "m"}))}, id="dtype metadata"),
        pytest.param(OrderedDict(w=np.ones(2)), id="not a dict"),
        pytest.param([np.ones(2)], id="a list"),
    ],
)
def test_weights_not_a_flat_dict_of_arrays_out_of_band_are_pickled_every_time(
    weights: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = count_pickles(monkeypatch)
    apart = ApartPickler()
    for _ in range(3):
        header, buffers = apart(weights) or (b"", [])
        back = pickle.loads(header, buffers=[bytearray(b) for b in buffers])
        assert pickle.dumps(back) == pickle.dumps(weights)
    assert len(made) == 3


def test_a_dtype_s_metadata_is_never_taken_from_a_kept_pickle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dtypes that differ only in their metadata are equal and hash alike: the plain one's
    pickle must not be reused for the tagged one, nor the other way round."""
    made = count_pickles(monkeypatch)
    plain, tagged = np.dtype("f4"), np.dtype("f4", metadata={"unit": "m"})
    apart = ApartPickler()
    for dtype in (plain, tagged, plain, plain, tagged):
        back = loaded(apart({"w": np.zeros(3, dtype)}))
        assert back["w"].dtype.metadata == dtype.metadata
    assert len(made) == 4, "the plain layout kept once, the tagged one never"


def test_one_value_under_two_keys_comes_back_as_one_as_plain_pickle_gives_it(monkeypatch: pytest.MonkeyPatch) -> None:
    made = count_pickles(monkeypatch)
    apart = ApartPickler()
    shared = np.ones(3, np.float32)
    apart({"a": np.zeros(3, np.float32), "b": np.zeros(3, np.float32)})
    for _ in range(2):
        back = loaded(apart({"a": shared, "b": shared}))
        assert back["a"] is back["b"] and back["a"].tolist() == [1.0] * 3
    assert len(made) == 3, "pickled every time"


def test_torch_tensors_reuse_the_pickle_as_arrays_and_come_back_as_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    made = count_pickles(monkeypatch)
    apart = ApartPickler()

    def state(scale: float) -> dict[str, Any]:
        return {"linear.weight": torch.full((4, 3), scale), "linear.bias": torch.arange(4.0) * scale}

    for scale in (1.0, 2.0, 3.0):
        back = loaded(apart(state(scale)))
        assert all(type(v) is torch.Tensor for v in back.values())
        for key, value in state(scale).items():
            assert torch.equal(back[key], value), key
    assert len(made) == 1
    # The same values as numpy arrays are another layout; a tensor that needs its gradient
    # pickles as torch pickles it (inside), every time.
    arrays = {k: v.numpy() for k, v in state(4.0).items()}
    assert_same(loaded(apart(arrays)), arrays)
    grad = {"w": torch.ones(2, requires_grad=True)}
    for _ in range(2):
        assert torch.equal(loaded(apart(grad))["w"], grad["w"].detach())
    assert len(made) == 4
