"""Minari's HDF5 episode file (``data/main_data.hdf5``), written by vecenv without a libhdf5 call
per episode.

Why: libhdf5 spends ~0.4 ms of CPU creating one episode's objects (a group, three attributes,
five datasets), more than a random CartPole episode's own ~22 env steps cost; written that way,
the file caps Minari output near half a plain single-env loop whatever runs the envs. Yet every
episode of a dataset has the same objects with the same names, types and header sizes: only its
length, its addresses and its attribute values differ. So the bytes of an episode's objects are
laid out once per dataset (an ``_EpisodeTemplate``) and, per episode, copied and patched at a few
known positions; the rows follow as they are, in one ``pwritev``.

The file is HDF5's original format, the one h5py writes by default and every HDF5 reads
(superblock version 0; groups as symbol tables: a local heap of names, a version-1 B-tree, and
symbol-table nodes; version-1 object headers; contiguous datasets). The datatype descriptions
are HDF5's own (``H5Tencode`` through h5py), so each dataset has exactly the type h5py's
``create_dataset`` gives the same array (bools included, an enum). Nothing else changes for a
reader: ``h5py`` and Minari open it, and libhdf5 can append to it afterwards.

    offset 0                                                                       end
    | superblock | root index | episode 0 | episode 1 | ... | root index | ... | root index |
                                \\_ the template's bytes, patched | each dataset's rows, 8-aligned

    the template: each dataset's object header; each group's names (local heap), symbol-table
    nodes and B-tree; the group's object header (with the attributes for the episode's group)

The root group's index (its names, symbol-table nodes, B-tree and header) can only be written
once its names are known, sorted as HDF5 sorts them; it is written at ``close`` and also by
``flush`` at the first episode and whenever the episode count has doubled since the last index,
so a run killed outright still leaves a readable file holding at least half of its episodes (an
index left behind by a later one is dead space, at most about one index's size). Between
indexes each episode's root entry is four numbers in numpy columns (``_RootEntries``, 32 bytes),
and the index is built from them column by column (``_root_index``), about 60 bytes an episode,
so a collection of millions of episodes holds tens of MiB for it, not a Python object per episode.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeAlias

import numpy as np
from gymnasium import spaces

from vecenv.errors import InvalidStateError
from vecenv.spaces import leaf_layout

UNDEFINED = 0xFFFF_FFFF_FFFF_FFFF  # HDF5's undefined address
_LEAF_K = 4  # the superblock's "group leaf node K": a symbol-table node holds 2K entries (HDF5's default)
_NODE_K = 16  # its "group internal node K": a B-tree node has at most 2K children (HDF5's default)
_ENTRY_SIZE = 40  # a symbol-table entry: name offset, header address, cache type, scratch pad
_SNOD_SIZE = 8 + 2 * _LEAF_K * _ENTRY_SIZE
_TREE_SIZE = 24 + (2 * _NODE_K + 1) * 8 + 2 * _NODE_K * 8
_SUPERBLOCK_SIZE = 96
_FREE_NULL = 1  # a local heap's "no free block"
_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# Object header message types.
_DATASPACE, _DATATYPE, _FILL_VALUE, _LAYOUT, _ATTRIBUTE, _SYMBOL_TABLE = 0x1, 0x3, 0x5, 0x8, 0xC, 0x11
_FILL_LATE_IF_SET = bytes((2, 2, 2, 1, 0, 0, 0, 0))  # version 2: allocate late, write if set, default (zero)
_SCALAR = bytes((1, 0, 0, 0, 0, 0, 0, 0))  # a version-1 dataspace of rank 0
_IOV_LIMIT = 512  # buffers per pwritev, well under every system's IOV_MAX


@dataclasses.dataclass(frozen=True)
class _Address:
    """An address relative to the start of the bytes being laid out (moved by their base)."""

    relative: int


@dataclasses.dataclass(frozen=True)
class _Slot:
    """Eight bytes filled in per episode (a length, an address, an attribute's value)."""

    name: str


_Part: TypeAlias = bytes | _Address | _Slot
_Buffer: TypeAlias = bytes | bytearray | memoryview  # what is written at an offset
#: An episode's rows as pieces of (observation leaves, action leaves, [rewards, terminations,
#: truncations]); the observation leaves of the last piece carry one more row, the final observation.
EpisodePieces: TypeAlias = Iterator[tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]]


def _padding(size: int) -> bytes:
    return bytes(-size % 8)


def hdf5_type(dtype: np.dtype) -> bytes:
    """HDF5's datatype message for ``dtype``, as h5py creates it (``H5Tencode`` without its
    two-byte prefix: the message id and the encoding version)."""
    from h5py import h5t

    encoded = h5t.py_create(np.dtype(dtype), logical=True).encode()
    if encoded[0] != _DATATYPE:
        raise InvalidStateError(f"h5py encoded {dtype} as an unexpected message {encoded[:2].hex()}")
    return bytes(encoded[2:])


class _Layout:
    """Bytes being laid out: the positions of the addresses in them (relative to their start)
    and of the per-episode slots."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.addresses: list[tuple[int, int]] = []  # (position, relative address)
        self.slots: dict[str, list[int]] = {}

    def here(self) -> int:
        return len(self.data)

    def put(self, *parts: _Part) -> None:
        for part in parts:
            if isinstance(part, _Address):
                self.addresses.append((len(self.data), part.relative))
                self.data += bytes(8)
            elif isinstance(part, _Slot):
                self.slots.setdefault(part.name, []).append(len(self.data))
                self.data += bytes(8)
            else:
                self.data += part

    def placed(self, base: int) -> bytearray:
        """A copy with every address moved to ``base``."""
        out = bytearray(self.data)
        for position, relative in self.addresses:
            struct.pack_into("<Q", out, position, base + relative)
        return out

    def object_header(self, messages: list[tuple[int, int, list[_Part]]]) -> int:
        """A version-1 object header of ``(type, flags, parts)`` messages; its position."""
        start = self.here()
        sizes = [
            sum(8 if isinstance(part, (_Address, _Slot)) else len(part) for part in parts) for _, _, parts in messages
        ]
        padded = [size + -size % 8 for size in sizes]
        self.put(struct.pack("<BBHII4x", 1, 0, len(messages), 1, sum(8 + size for size in padded)))
        for (kind, flags, parts), size, full in zip(messages, sizes, padded):
            self.put(struct.pack("<HHB3x", kind, full, flags), *parts, bytes(full - size))
        return start

    def group_index(self, entries: Sequence[tuple[bytes, _Part, tuple[_Part, _Part] | None]]) -> tuple[int, int]:
        """A group's local heap of names, symbol-table nodes and B-tree for ``entries`` (name,
        object header address, and for a subgroup its symbol table message's two addresses);
        returns the positions of the B-tree's root and of the heap."""
        entries = sorted(entries, key=lambda entry: entry[0])  # HDF5 orders names by strcmp
        names = bytearray(8)  # offset 0 is the empty name
        offsets = []
        for name, _, _ in entries:
            offsets.append(len(names))
            names += name + bytes(8 - len(name) % 8)  # null-terminated, padded to 8
        heap = self.here()
        self.put(b"HEAP\0\0\0\0", struct.pack("<QQ", len(names), _FREE_NULL), _Address(heap + 32), bytes(names))
        children: list[tuple[int, int]] = []  # (position, offset of the largest name below it)
        for first in range(0, len(entries), 2 * _LEAF_K):
            chunk = range(first, min(first + 2 * _LEAF_K, len(entries)))
            node = self.here()
            self.put(b"SNOD", struct.pack("<BBH", 1, 0, len(chunk)))
            for i in chunk:
                _, header, cache = entries[i]
                self.put(struct.pack("<Q", offsets[i]), header)
                if cache is None:
                    self.put(bytes(24))
                else:
                    self.put(struct.pack("<II", 1, 0), *cache)
            self.put(bytes(_SNOD_SIZE - (self.here() - node)))
            children.append((node, offsets[chunk[-1]]))
        level = 0
        while True:
            groups = [children[i : i + 2 * _NODE_K] for i in range(0, len(children), 2 * _NODE_K)] or [[]]
            start = self.here()
            nodes = []
            left_key = 0
            for i, group in enumerate(groups):
                node = start + i * _TREE_SIZE
                left = _Address(node - _TREE_SIZE) if i > 0 else struct.pack("<Q", UNDEFINED)
                right = _Address(node + _TREE_SIZE) if i + 1 < len(groups) else struct.pack("<Q", UNDEFINED)
                self.put(b"TREE", struct.pack("<BBH", 0, level, len(group)), left, right, struct.pack("<Q", left_key))
                for child, key in group:
                    self.put(_Address(child), struct.pack("<Q", key))
                self.put(bytes(_TREE_SIZE - (self.here() - node)))
                left_key = group[-1][1] if group else 0
                nodes.append((node, left_key))
            if len(nodes) == 1:
                return nodes[0][0], heap
            children, level = nodes, level + 1


# Root-group index, built with numpy: one structured array per kind of node, no object per episode.
_HEAP_HEADER_SIZE = 32
_ENTRY_DTYPE = np.dtype(
    [("name", "<u8"), ("header", "<u8"), ("cache", "<u4"), ("reserved", "<u4"), ("btree", "<u8"), ("heap", "<u8")]
)
_SNOD_DTYPE = np.dtype(
    [
        ("signature", "S4"),
        ("version", "u1"),
        ("reserved", "u1"),
        ("count", "<u2"),
        ("entries", _ENTRY_DTYPE, (2 * _LEAF_K,)),
    ]
)
_TREE_DTYPE = np.dtype(
    [
        ("signature", "S4"),
        ("type", "u1"),
        ("level", "u1"),
        ("count", "<u2"),
        ("left", "<u8"),
        ("right", "<u8"),
        ("keys_children", "<u8", (4 * _NODE_K + 1,)),  # key, child, key, ..., child, key
    ]
)
_ROOT_HEADER_SIZE = 40  # a version-1 object header holding one symbol table message
_EPISODE_PREFIX = b"episode_"
_MAX_DIGITS = 20  # of a uint64


class _RootEntries:
    """Each episode's root symbol-table entry as growable numpy columns (its id and the addresses
    of its header, B-tree and heap): 32 bytes an episode, with no Python object per episode, so
    a collection of millions of episodes keeps its index in a few tens of MiB."""

    DTYPE = np.dtype([("id", "<i8"), ("header", "<u8"), ("btree", "<u8"), ("heap", "<u8")])

    def __init__(self) -> None:
        self._rows = np.zeros(64, self.DTYPE)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, episode_id: int, header: int, btree: int, heap: int) -> None:
        """Add an episode's entry, doubling the columns' capacity when they are full."""
        if self._count == len(self._rows):
            grown = np.zeros(2 * len(self._rows), self.DTYPE)
            grown[: self._count] = self._rows
            self._rows = grown
        self._rows[self._count] = (episode_id, header, btree, heap)
        self._count += 1

    def rows(self) -> np.ndarray:
        """The entries so far (a view: valid until the next ``append``)."""
        return self._rows[: self._count]

    def nbytes(self) -> int:
        """The bytes the columns hold (their capacity)."""
        return int(self._rows.nbytes)


@dataclasses.dataclass(frozen=True)
class _RootIndex:
    """The root group's index laid out at ``base``: its bytes and the absolute addresses of its
    object header, B-tree root and local heap."""

    data: bytearray
    header: int
    btree: int
    heap: int


def _episode_names(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each ``episode_<id>`` name, null-terminated and zero-padded to a multiple of 8 bytes, as
    the rows of a ``uint8`` matrix as wide as the longest; and each name's padded length."""
    negative = ids < 0
    magnitude = np.abs(ids).view(np.uint64)  # int64's minimum wraps to itself: 2**63 as uint64
    digits = np.ones(len(ids), np.int64)
    for power in range(1, _MAX_DIGITS):
        digits += magnitude >= np.uint64(10**power)
    length = len(_EPISODE_PREFIX) + negative + digits
    padded = length + 8 - length % 8
    names = np.zeros((len(ids), int(padded.max(initial=16))), np.uint8)
    names[:, : len(_EPISODE_PREFIX)] = np.frombuffer(_EPISODE_PREFIX, np.uint8)
    names[negative, len(_EPISODE_PREFIX)] = ord("-")
    last = length - 1  # the column of each name's last digit
    for place in range(int(digits.max(initial=1))):
        rows = np.flatnonzero(digits > place)
        value = (magnitude[rows] // np.uint64(10**place)) % np.uint64(10)
        names[rows, last[rows] - place] = value.astype(np.uint8) + ord("0")
    return names, padded


def _root_index(entries: np.ndarray, base: int) -> _RootIndex:
    """The root group's local heap of names, symbol-table nodes, B-tree levels and object header
    for ``entries`` (``_RootEntries.DTYPE`` rows), laid out at ``base``: the bytes
    ``_Layout.group_index`` and ``_Layout.object_header`` give the same entries, built column by
    column with numpy rather than a Python object per entry."""
    count = len(entries)
    names, padded = _episode_names(entries["id"])
    order = np.argsort(names.view(f"S{names.shape[1]}").ravel(), kind="stable")  # HDF5 sorts by strcmp
    names, padded = names[order], padded[order]
    heap_size = 8 + int(padded.sum())  # offset 0 is the empty name
    offsets = (8 + np.cumsum(padded) - padded).astype(np.uint64)
    leaf_nodes = -(-count // (2 * _LEAF_K))
    level_nodes = []
    children = leaf_nodes
    while True:
        nodes = max(1, -(-children // (2 * _NODE_K)))
        level_nodes.append(nodes)
        if nodes == 1:
            break
        children = nodes
    heap = 0
    snod_at = _HEAP_HEADER_SIZE + heap_size
    tree_at = snod_at + leaf_nodes * _SNOD_SIZE
    header = tree_at + sum(level_nodes) * _TREE_SIZE
    data = bytearray(header + _ROOT_HEADER_SIZE)
    struct.pack_into("<4s4xQQQ", data, heap, b"HEAP", heap_size, _FREE_NULL, base + heap + _HEAP_HEADER_SIZE)
    # Each name's padded bytes, one after the other: the rows of the matrix cut to their lengths.
    np.frombuffer(data, np.uint8, heap_size - 8, heap + _HEAP_HEADER_SIZE + 8)[:] = names[
        np.arange(names.shape[1]) < padded[:, None]
    ]
    del names, padded

    slots = leaf_nodes * 2 * _LEAF_K
    snods = np.frombuffer(data, _SNOD_DTYPE, leaf_nodes, snod_at)
    snods["signature"], snods["version"] = b"SNOD", 1
    snods["count"] = np.minimum(2 * _LEAF_K, count - 2 * _LEAF_K * np.arange(leaf_nodes))
    symbols = snods["entries"]

    def fill(field: str, column: np.ndarray | int) -> None:
        """One field of every symbol-table entry, padded with empty slots to whole nodes."""
        filled = np.zeros(slots, _ENTRY_DTYPE[field])
        filled[:count] = column
        symbols[field] = filled.reshape(leaf_nodes, 2 * _LEAF_K)

    fill("name", offsets)
    for field in ("header", "btree", "heap"):
        fill(field, entries[field][order])  # one sorted column at a time
    fill("cache", 1)  # a subgroup's entry caches its symbol table's addresses
    # Each child of the level being built: its relative position and the offset of the largest
    # name below it.
    child_at = snod_at + _SNOD_SIZE * np.arange(leaf_nodes, dtype=np.uint64)
    child_key = offsets[np.minimum(2 * _LEAF_K * np.arange(1, leaf_nodes + 1), count) - 1]
    at = tree_at
    for level, nodes in enumerate(level_nodes):
        tree = np.frombuffer(data, _TREE_DTYPE, nodes, at)
        positions = at + _TREE_SIZE * np.arange(nodes, dtype=np.uint64)
        tree["signature"], tree["type"], tree["level"] = b"TREE", 0, level
        tree["count"] = np.minimum(2 * _NODE_K, len(child_at) - 2 * _NODE_K * np.arange(nodes))
        tree["left"] = np.concatenate(([UNDEFINED], base + positions[:-1])).astype(np.uint64)
        tree["right"] = np.concatenate((base + positions[1:], [UNDEFINED])).astype(np.uint64)
        addresses = np.zeros(nodes * 2 * _NODE_K, np.uint64)
        keys = np.zeros(nodes * 2 * _NODE_K, np.uint64)
        addresses[: len(child_at)] = base + child_at
        keys[: len(child_key)] = child_key
        links = tree["keys_children"]
        links[:, 1::2] = addresses.reshape(nodes, 2 * _NODE_K)
        links[:, 2::2] = keys.reshape(nodes, 2 * _NODE_K)
        last = np.minimum(2 * _NODE_K * np.arange(1, nodes + 1), len(child_key)) - 1
        node_key = child_key[last] if len(child_key) else np.zeros(nodes, np.uint64)
        links[1:, 0] = node_key[:-1]  # a node's left key: the largest name of the node before it
        child_at, child_key, at = positions, node_key, at + nodes * _TREE_SIZE
    btree = at - _TREE_SIZE
    struct.pack_into("<BBHII4xHHB3xQQ", data, header, 1, 0, 1, 1, 24, _SYMBOL_TABLE, 16, 0, base + btree, base + heap)
    return _RootIndex(data, base + header, base + btree, base + heap)


@dataclasses.dataclass(frozen=True)
class _Leaf:
    """One dataset of an episode: its rows' shape and dtype, and whether it has ``T + 1`` rows."""

    shape: tuple[int, ...]
    dtype: np.dtype
    observation: bool
    row_bytes: int


_Tree: TypeAlias = dict[bytes, "_Tree"] | int  # a group's children by name, or a leaf's index


def _add_leaf(leaves: list[_Leaf], shape: tuple[int, ...], dtype: np.dtype, observation: bool) -> int:
    """Append a dataset of rows of ``shape`` and ``dtype`` to ``leaves``; its index."""
    row_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    leaves.append(_Leaf(shape, dtype, observation, row_bytes))
    return len(leaves) - 1


class _EpisodeTemplate:
    """The bytes of one episode's objects, laid out once: its group with the attributes ``id``,
    (``seed``) and ``total_steps``, subgroups for Dict and Tuple spaces, and a header per
    dataset; what differs per episode sits in slots."""

    def __init__(self, tree: dict[bytes, _Tree], leaves: list[_Leaf], attributes: list[tuple[bytes, np.dtype]]) -> None:
        self.layout = _Layout()
        header, cache = self._emit(tree, leaves, attributes)
        self.size = self.layout.here()
        self.header, self.btree, self.heap = header, *cache
        slots = self.layout.slots
        # Per dataset: (T + 1 rows?, bytes per row, where its row count goes, its address, its size).
        self.datasets = [
            (leaf.observation, leaf.row_bytes, slots[f"rows{i}"], slots[f"address{i}"][0], slots[f"size{i}"][0])
            for i, leaf in enumerate(leaves)
        ]
        self.values = [(slots[name.decode()][0], "<q" if dtype == np.int64 else "<Q") for name, dtype in attributes]

    def _emit(
        self, node: dict[bytes, _Tree], leaves: list[_Leaf], attributes: list[tuple[bytes, np.dtype]]
    ) -> tuple[int, tuple[int, int]]:
        layout = self.layout
        entries: list[tuple[bytes, _Part, tuple[_Part, _Part] | None]] = []
        for name, child in node.items():
            if isinstance(child, int):
                leaf = leaves[child]
                rank = 1 + len(leaf.shape)
                dims = b"".join(struct.pack("<Q", n) for n in leaf.shape)
                row = f"rows{child}"
                header = layout.object_header(
                    [
                        (_DATASPACE, 0, [struct.pack("<BBBB4x", 1, rank, 1, 0), _Slot(row), dims, _Slot(row), dims]),
                        (_DATATYPE, 1, [hdf5_type(leaf.dtype)]),
                        (_FILL_VALUE, 1, [_FILL_LATE_IF_SET]),
                        (_LAYOUT, 0, [bytes((3, 1)), _Slot(f"address{child}"), _Slot(f"size{child}")]),
                    ]
                )
                entries.append((name, _Address(header), None))
            else:
                header, (btree, heap) = self._emit(child, leaves, [])
                entries.append((name, _Address(header), (_Address(btree), _Address(heap))))
        btree, heap = layout.group_index(entries)
        messages: list[tuple[int, int, list[_Part]]] = [(_SYMBOL_TABLE, 0, [_Address(btree), _Address(heap)])]
        for name, dtype in attributes:
            kind = hdf5_type(dtype)
            named = name + b"\0"
            parts: list[_Part] = [struct.pack("<BBHHH", 1, 0, len(named), len(kind), len(_SCALAR))]
            parts += [named + _padding(len(named)), kind + _padding(len(kind)), _SCALAR, _Slot(name.decode())]
            messages.append((_ATTRIBUTE, 0, parts))
        return layout.object_header(messages), (btree, heap)


def _space_tree(space: spaces.Space, leaves: list[_Leaf], observation: bool) -> _Tree:
    """The datasets of ``space`` as Minari lays them out: Dict keys as subgroups, Tuple items as
    ``_index_<i>`` subgroups, in the space's order (the leaves' order of ``leaf_layout``)."""
    if isinstance(space, spaces.Dict):
        return {key.encode(): _space_tree(sub, leaves, observation) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return {f"_index_{i}".encode(): _space_tree(sub, leaves, observation) for i, sub in enumerate(space.spaces)}
    ((_, *shape), dtype) = leaf_layout(space, 0)[0]
    return _add_leaf(leaves, tuple(shape), np.dtype(dtype), observation)


class Hdf5EpisodeFile:
    """Episodes in Minari's HDF5 layout, appended to one new file; see the module's docstring.

    Each episode is the group ``episode_<id>`` with the attributes ``id``, ``total_steps`` and
    (when known) ``seed``, one dataset per leaf: ``observations`` (``T + 1`` rows),
    ``actions``, ``rewards`` (float64), ``terminations`` and ``truncations`` (bool), with the
    dtypes of the spaces, and an empty ``infos`` group: what Minari's
    ``HDF5Storage.update_episodes`` writes for the same episode as its ``DataCollector`` records
    it (datasets contiguous rather than chunked: Minari reads them alike).
    """

    def __init__(self, path: Path, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.leaves: list[_Leaf] = []
        self.tree: dict[bytes, _Tree] = {
            b"observations": _space_tree(observation_space, self.leaves, observation=True),
            b"actions": _space_tree(action_space, self.leaves, observation=False),
        }
        for name, dtype in ((b"rewards", np.float64), (b"terminations", np.bool_), (b"truncations", np.bool_)):
            self.tree[name] = _add_leaf(self.leaves, (), np.dtype(dtype), observation=False)
        # No infos are recorded, as Minari's DataCollector records none by default, and it still
        # writes the empty group: without it Minari reads an episode's infos as None, not {}
        # (and EpisodeData's repr fails on it).
        self.tree[b"infos"] = {}
        self._templates: dict[np.dtype | None, _EpisodeTemplate] = {}
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o644)
        self._end = _SUPERBLOCK_SIZE
        # Per episode, its root symbol-table entry: its id, its header's, B-tree's and heap's addresses.
        self._entries = _RootEntries()
        self._steps = 0  # of every episode written
        # The episodes and steps in the index the superblock points to: none, in an empty file
        # that is a valid HDF5 file from the start.
        self._indexed = self._indexed_steps = 0
        self._write_index()

    def _template(self, seed: int | None) -> _EpisodeTemplate:
        """The template for an episode with no seed, or with a seed of the dtype h5py gives it
        (int64, or uint64 past int64's range)."""
        key = None if seed is None else np.asarray(seed).dtype
        template = self._templates.get(key)
        if template is None:
            int64 = np.dtype(np.int64)
            attributes = [(b"id", int64), (b"total_steps", int64)]
            if key is not None:
                attributes.insert(1, (b"seed", int64 if key == int64 else key))
            template = self._templates[key] = _EpisodeTemplate(self.tree, self.leaves, attributes)
        return template

    def write(
        self,
        index: int,
        seed: int | None,
        length: int,
        pieces: EpisodePieces,
    ) -> None:
        """Write episode ``index`` of ``length`` steps from pieces of (observation leaves, action
        leaves, [rewards, terminations, truncations]) rows; the observation leaves of the last
        piece carry one more row, the final observation. A write cut short (Ctrl+C, an error)
        leaves nothing of the episode behind."""
        seed = None if seed is None else int(seed)  # stored as h5py stores a Python int
        template = self._template(seed)
        base = self._end
        header = template.layout.placed(base)
        at = base + template.size
        extents = []
        for observation, row_bytes, rows_at, address_at, size_at in template.datasets:
            rows = length + 1 if observation else length
            size = rows * row_bytes
            for position in rows_at:
                struct.pack_into("<Q", header, position, rows)
            struct.pack_into("<Q", header, address_at, at if size else UNDEFINED)
            struct.pack_into("<Q", header, size_at, size)
            extents.append((at, size))
            at += size + -size % 8
        for (position, code), value in zip(template.values, (index, length) if seed is None else (index, seed, length)):
            struct.pack_into(code, header, position, value)
        try:
            self._write_rows(header, base, extents, pieces)
        except BaseException:
            os.ftruncate(self._fd, base)
            raise
        self._end = at
        self._steps += length
        self._entries.append(index, base + template.header, base + template.btree, base + template.heap)

    def _write_rows(
        self,
        header: bytearray,
        base: int,
        extents: list[tuple[int, int]],
        pieces: EpisodePieces,
    ) -> None:
        """The header, the padding after each dataset, then each piece's rows at their datasets'
        places: one ``pwritev`` for an episode that comes in one piece (the usual case)."""
        writes: list[tuple[int, _Buffer]] = [(base, header)]
        writes += [(start + size, bytes(-size % 8)) for start, size in extents if size % 8]
        cursors = [start for start, _ in extents]
        for piece in pieces:
            for i, (leaf, column) in enumerate(zip(self.leaves, [*piece[0], *piece[1], *piece[2]])):
                column = np.ascontiguousarray(column, dtype=leaf.dtype)
                writes.append((cursors[i], column.data))
                cursors[i] += column.nbytes
            _write_runs(self._fd, writes)
            writes = []
        _write_runs(self._fd, writes)
        if cursors != [start + size for start, size in extents]:
            got = [
                (cursor - start) // max(leaf.row_bytes, 1)
                for cursor, (start, _), leaf in zip(cursors, extents, self.leaves)
            ]
            want = [size // max(leaf.row_bytes, 1) for (_, size), leaf in zip(extents, self.leaves)]
            raise InvalidStateError(f"Minari output: an episode's pieces held {got} rows per dataset, expected {want}")

    def _write_index(self) -> None:
        """The root group's index after the episodes, then the superblock pointing to it."""
        base = self._end
        index = _root_index(self._entries.rows(), base)
        _write_runs(self._fd, [(base, index.data)])
        self._end = base + len(index.data)
        superblock = _SIGNATURE + bytes((0, 0, 0, 0, 0, 8, 8, 0)) + struct.pack("<HHI", _LEAF_K, _NODE_K, 0)
        superblock += struct.pack("<QQQQ", 0, UNDEFINED, self._end, UNDEFINED)
        superblock += struct.pack("<QQII", 0, index.header, 1, 0) + struct.pack("<QQ", index.btree, index.heap)
        _write_runs(self._fd, [(0, superblock)])
        self._indexed, self._indexed_steps = len(self._entries), self._steps

    def flush(self) -> None:
        """Index the episodes written so far if their count has doubled since the last index
        (the first episode included)."""
        if len(self._entries) and len(self._entries) >= 2 * self._indexed:
            self._write_index()

    def close(self) -> None:
        """Index every episode and close the file (once)."""
        if self._fd < 0:
            return
        try:
            if self._indexed != len(self._entries):
                self._write_index()
        finally:
            os.close(self._fd)
            self._fd = -1

    def bytes_written(self) -> int:
        """The file's size."""
        return self._end

    def readable_counts(self) -> tuple[int, int]:
        """The episodes and steps a reader finds in the file now: those of its last index."""
        return self._indexed, self._indexed_steps


def _write_runs(fd: int, writes: list[tuple[int, _Buffer]]) -> None:
    """Write each ``(offset, buffer)``, one ``pwritev`` per run of adjacent ones."""
    writes.sort(key=lambda write: write[0])
    i = 0
    while i < len(writes):
        offset, first = writes[i]
        run = [memoryview(first).cast("B")]
        end = offset + run[0].nbytes
        i += 1
        while i < len(writes) and writes[i][0] == end and len(run) < _IOV_LIMIT:
            run.append(memoryview(writes[i][1]).cast("B"))
            end += run[-1].nbytes
            i += 1
        _pwrite_all(fd, run, offset)


def _pwrite_all(fd: int, buffers: list[memoryview], offset: int) -> None:
    if not hasattr(os, "pwritev"):  # Windows: seek, then write
        os.lseek(fd, offset, os.SEEK_SET)
        rest = b"".join(buffers)
        while rest:
            rest = rest[os.write(fd, rest) :]
        return
    written = os.pwritev(fd, buffers, offset)
    total = sum(buffer.nbytes for buffer in buffers)
    if written < total:  # a short write (a full disk raises instead): finish byte by byte
        rest = b"".join(buffers)[written:]
        offset += written
        while rest:
            n = os.pwrite(fd, rest, offset)
            rest, offset = rest[n:], offset + n
