"""New weights through one shared slot: their arrays' bytes copied in once, never pickled.

A rollout's new weights used to be pickled whole in the parent (a torch ``state_dict`` of
4 MiB: several milliseconds) and their bytes carried inside every worker's command (small
weights) or written into a new sealed memfd per version (large ones, whose making, writing
and sealing cost ~0.1 ms even for a few KiB). Here they are pickled with protocol 5, which
leaves each contiguous array's bytes out of the pickle (out-of-band buffers); the parent copies
those bytes into a slot, a shared block that every worker maps once and that lasts across
versions; each command carries only the rest, a few hundred bytes (:class:`SlotWeights`), and
each worker copies the bytes out of the slot into arrays of its own as it loads them.

::

    parent: weights -> pickle_apart -> header + array buffers
                                          |         |
            ROLLOUT(... SlotWeights(header, spans, slot)) ... buffers -> WeightsSlot (shared)
                                          |                                   |
    worker: SlotWeights.load(its mapping of the slot) -> arrays of its own  <-+

The slot is written only while no call is in flight: when a new version is first sent. Every
worker that answered the previous call has loaded its weights by then. A worker still busy with
an abandoned call (a timeout) may read that call's weights after the slot was written again, a
mix of two versions; that call's reply is dropped, and the newer version, which every worker is
sent before its next rollout, is loaded over them. A torch tensor on the CPU travels as its
numpy array and is made a tensor again in the worker (torch pickles a tensor's bytes inside the
pickle); anything else pickles as usual, inside the header. A learner's weights keep their
layout from version to version, so the parent keeps the last header and pickles again only
when the keys, dtypes or shapes change (:class:`ApartPickler`).
"""

from __future__ import annotations

import copyreg
import functools
import io
import pickle
import sys
from typing import Any

import numpy as np

from vecenv.wire.buffers import HAVE_MEMFD, SharedBlock
from vecenv.wire.memory import check_block
from vecenv.wire.protocol import CHECKED_COPY_BYTES, SlotWeights

__all__ = ["ApartPickler", "WeightsSlot", "pickle_apart", "slot_bytes", "tensor_from_array"]


def tensor_from_array(array: Any) -> Any:
    """A worker's torch tensor of a CPU tensor that travelled as its numpy array (sharing the
    array's memory, which the worker owns)."""
    import torch

    return torch.from_numpy(array)


def _array_of_tensor(tensor: Any) -> Any:
    """A CPU tensor's numpy array (sharing its memory), or ``None`` where numpy cannot hold it
    (bfloat16, a conjugate or negative view, one that needs its gradient, on another device)."""
    torch = sys.modules["torch"]
    if not tensor.requires_grad and tensor.device.type == "cpu" and tensor.layout is torch.strided:
        try:
            return tensor.numpy()
        except (TypeError, RuntimeError):
            pass
    return None


def _tensor_as_array(tensor: Any) -> Any:
    """A CPU tensor's reduction to its numpy array (no copy), so that its bytes too stay out of
    the pickle (torch's own pickling copies them in); torch's own where numpy cannot hold it."""
    array = _array_of_tensor(tensor)
    return tensor.__reduce_ex__(5) if array is None else (tensor_from_array, (array,))


def pickle_apart(value: Any) -> tuple[bytes, list[memoryview]] | None:
    """``value`` pickled with its contiguous arrays' bytes left out: the pickle and those
    bytes (views of the arrays, in the order the pickle wants them back), or ``None`` when
    plain pickle cannot pickle it (it then travels cloudpickled, as before)."""
    buffers: list[pickle.PickleBuffer] = []
    try:
        torch = sys.modules.get("torch")
        if torch is None:  # no tensors can be in it: the C pickler alone
            header = pickle.dumps(value, 5, buffer_callback=buffers.append)
        else:  # tensors (of that exact type: not a Parameter) reduced to their arrays
            out = io.BytesIO()
            pickler = pickle.Pickler(out, 5, buffer_callback=buffers.append)
            pickler.dispatch_table = {**copyreg.dispatch_table, torch.Tensor: _tensor_as_array}
            pickler.dump(value)
            header = out.getvalue()
    except Exception:
        return None
    return header, [buffer.raw() for buffer in buffers]


class ApartPickler:
    """:func:`pickle_apart` that keeps the last pickle of a flat mapping of arrays and reuses it
    for the next one laid out alike.

    A learner sends weights of one layout again and again, and pickling them cold after an
    update (~100 us for a handful of arrays here) cost more than copying their bytes. For a
    ``dict`` of str keys whose values are all numpy arrays (or CPU tensors, which travel as
    theirs) that leave their bytes out of the pickle, the pickle without those bytes depends
    only on the keys, their order, each value's kind, dtype and shape: where those match the
    last one's, it is the last one's, and only the new arrays' buffers are taken. Anything else
    is pickled as :func:`pickle_apart` pickles it.
    """

    def __init__(self) -> None:
        self._layout: tuple[Any, ...] | None = None
        self._header = b""

    def __call__(self, value: Any) -> tuple[bytes, list[memoryview]] | None:
        flat = _flat_arrays(value)
        if flat is not None and flat[0] == self._layout:
            # As the pickler takes them (an empty array's too, which a memoryview cannot cast).
            return self._header, [pickle.PickleBuffer(array.data).raw() for array in flat[1]]
        apart = pickle_apart(value)
        self._layout, self._header = None, b""
        # Kept only where every array did leave its bytes out, one buffer each, in order.
        if flat is not None and apart is not None and len(apart[1]) == len(flat[1]):
            self._layout, self._header = flat[0], apart[0]
        return apart


def _flat_arrays(value: Any) -> tuple[tuple[Any, ...], list[np.ndarray]] | None:
    """The layout of a ``dict`` of str keys to numpy arrays or CPU tensors, and those arrays in
    its order; ``None`` for anything else, for an array that pickles its bytes inside (not
    contiguous, objects, structured, with metadata, empty items), or for a value under two keys
    (the pickle holds it once, and a kept one would hold two). A read-only array's buffer is
    marked so in the pickle: whether it is writeable is part of the layout."""
    if type(value) is not dict:
        return None
    layout: list[Any] = []
    arrays: list[np.ndarray] = []
    seen: set[int] = set()
    torch = sys.modules.get("torch")
    tensor = None if torch is None else torch.Tensor
    for key, item in value.items():
        kind = type(item)
        array = item if kind is np.ndarray else _array_of_tensor(item) if kind is tensor else None
        if array is None or type(key) is not str or type(array) is not np.ndarray or id(item) in seen:
            return None
        seen.add(id(item))
        flags, dtype = array.flags, array.dtype
        # (The metadata outside the cache: dtypes that differ only in it are equal, hash alike.)
        plain = None if dtype.metadata is not None else _out_of_band_dtype(dtype)
        if plain is None or not flags.c_contiguous:
            return None
        layout += (key, kind, type(dtype), plain, array.shape, flags.writeable)
        arrays.append(array)
    return tuple(layout), arrays


@functools.lru_cache(maxsize=64)
def _out_of_band_dtype(dtype: np.dtype) -> str | None:
    """``dtype.str`` where numpy pickles a contiguous array of it without its bytes (and,
    with its class and no metadata, the string says all the pickle holds of it); ``None``
    otherwise."""
    plain = not dtype.hasobject and dtype.names is None and dtype.itemsize > 0
    return dtype.str if plain else None


class WeightsSlot:
    """The parent's slot: a shared block of ``capacity`` bytes (a memfd), numbered so that a
    worker knows whether the one it maps is current; a larger one replaces it when weights
    outgrow it."""

    def __init__(self, capacity: int, number: int) -> None:
        if capacity >= CHECKED_COPY_BYTES:
            check_block(capacity, "the new weights' shared slot", shared=True)
        self.block = SharedBlock.create(capacity, None, "the new weights' shared slot", "vecenv-weights-slot")
        self.capacity, self.number = capacity, number
        self._bytes = memoryview(self.block.buf)

    @staticmethod
    def available() -> bool:
        """Whether a slot can be made here (Linux's memfds; elsewhere weights travel pickled)."""
        return HAVE_MEMFD

    @property
    def fd(self) -> int | None:
        return self.block.fd

    def write(self, header: bytes, buffers: list[memoryview]) -> SlotWeights:
        """Copy ``buffers`` into the slot (which must hold them) and describe where they are."""
        spans = []
        offset = 0
        for buffer in buffers:
            size = buffer.nbytes
            self._bytes[offset : offset + size] = buffer
            spans.append((offset, size))
            offset += size
        return SlotWeights(header, tuple(spans), self.number)

    def close(self) -> None:
        """Unmap the slot and close its descriptor (each worker's mapping stays its own)."""
        self._bytes.release()
        self.block.close(unlink=False)


def slot_bytes(buffers: list[memoryview]) -> int:
    """The bytes a slot needs for ``buffers``."""
    return sum(buffer.nbytes for buffer in buffers)
