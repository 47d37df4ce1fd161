"""vLLM's prefix cache, block for block: the ``BlockPool`` (its free-block queue, reference
counts and hash-to-block map) and the chained block hashes of each request, as vLLM 0.33 and
0.34 keep them for one full-attention KV-cache group (``vllm/v1/core/block_pool.py``,
``kv_cache_utils.py``'s ``FreeKVCacheBlockQueue`` and ``get_request_block_hasher``,
``single_type_kv_cache_manager.py``'s ``FullAttentionManager``).

:class:`PrefixPool` holds what the pool holds; :class:`BlockKeys` gives each request's block
hashes. A hash here is any value equal exactly when vLLM's would be: a block's hash covers
every token up to its end (chained) and the request's LoRA adapter. Prompt tokens come from
the request's ``hash_ids`` (one id per ``hash_block_size`` tokens, equal ids = equal tokens,
the mooncake_trace convention), or its explicit ``prompt_token_ids``, or neither (every
prompt unique); output tokens are unique to their request, so a block holding any is shared
with no other request (a preempted request can still hit its own).

The scheduler side (admission, allocation, caching, freeing) is in
:class:`~cgdispatch.workload.vllm_scheduler.VllmSchedulerCore`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from itertools import chain as chained

import numpy as np

__all__ = ["PrefixPool", "BlockKeys"]

_INF = 1 << 62
KEY_CHUNK = 2048  # requests whose block hashes BlockKeys makes at once
KEY_CHUNKS_KEPT = 4  # such chunks kept (requests are admitted about in table order)


class BlockKeys:
    """The block hashes of each request of a table (index 0..n-1), computed on demand.

    ``hash_ids[i]``: request ``i``'s ids, one per ``hash_block_size`` prompt tokens (None:
    not given); ``token_ids[i]``: its prompt token ids (None: not given). With neither, the
    request's prompt is unique. ``lora[i]`` (< 0: none) enters every hash, as vLLM's
    ``_gen_lora_extra_hash_keys`` does."""

    def __init__(
        self,
        prompt: Sequence[int],
        lora: Sequence[int],
        block_size: int,
        hash_ids: Sequence[Sequence[int]] | None = None,
        token_ids: Sequence[Sequence[int]] | None = None,
        hash_block_size: int = 512,
    ) -> None:
        self.prompt, self.lora, self.bs = prompt, lora, block_size
        self.hash_ids, self.token_ids, self.hbs = hash_ids, token_ids, hash_block_size
        self.keys: dict[int, list[int]] = {}  # request -> its prompt-only block hashes
        self._chain: dict[tuple[Hashable, Hashable], int] = {}  # (parent, content) -> id
        # hash_ids chained for every request at once (numpy), when they are 64-bit ints:
        # request i's chain ids are _chains[_start[i]:_start[i + 1]]; None: chained one
        # request at a time in prompt_keys
        self._chains: np.ndarray | None = None
        self._start: list[int] = []
        # with _chains: the keys of KEY_CHUNK requests at a time, made at once (numpy), a
        # few chunks kept: chunk -> (every key of its requests, each request's first key)
        self._chunks: dict[int, tuple[list[int], list[int]]] = {}
        self._prompt_np: np.ndarray | None = None
        if hash_ids is not None:
            self._chain_all(hash_ids)

    def _chain_all(self, hash_ids: Sequence[Sequence[int]]) -> None:
        """Every request's chain of hash ids interned at once: an id per distinct (LoRA
        adapter, ids up to here), depth by depth, the ids of one depth numbered after those
        of the depths before (equal exactly where :meth:`prompt_keys`' one-by-one interning
        makes them equal; the numbers themselves mean nothing)."""
        n = len(hash_ids)
        lens = np.fromiter(map(len, hash_ids), dtype=np.int64, count=n)
        total = int(lens.sum())
        try:
            flat = np.fromiter(chained.from_iterable(hash_ids), dtype=np.int64, count=total)
            lora = np.asarray(self.lora, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            return  # ids that are no 64-bit ints: one request at a time
        if total >= 1 << 31 or (n and (int(lora.min()) < -1 or int(lora.max()) >= 1 << 31)):
            return
        _, code = np.unique(flat, return_inverse=True)  # each id as a number below 2^31
        code = code.reshape(-1).astype(np.int64)
        start = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=start[1:])
        longest_first = np.argsort(-lens, kind="stable")
        # at depth d, the requests with more than d ids: the first active[d] of longest_first
        depths = -np.arange(int(lens.max(initial=0)))
        active = np.searchsorted(-lens[longest_first], depths, "left")
        out = np.empty(total, dtype=np.int64)
        parent = lora[longest_first] + 1  # depth 0's parent: the adapter
        base = 0
        for depth, count in enumerate(active.tolist()):
            at = start[longest_first[:count]] + depth
            pair = (parent[:count] << 32) | code[at]
            uniq, inv = np.unique(pair, return_inverse=True)
            parent = base + inv.reshape(-1)
            out[at] = parent
            base += len(uniq)
        self._chains, self._start = out, start.tolist()
        self._prompt_np = np.asarray(self.prompt, dtype=np.int64)

    def _chunk(self, c: int) -> tuple[list[int], list[int]]:
        """The keys of requests ``c * KEY_CHUNK`` on, as :meth:`prompt_keys` names them
        one request at a time (a request whose ids fall short of its prompt's full blocks
        gets an empty slot there, and is named one at a time, failing as it would)."""
        got = self._chunks.get(c)
        if got is not None:
            return got
        lo = c * KEY_CHUNK
        hi = min(lo + KEY_CHUNK, len(self._prompt_np))
        bs, hbs = self.bs, self.hbs
        full = self._prompt_np[lo:hi] // bs
        start = np.asarray(self._start[lo : hi + 1], dtype=np.int64)
        # ids the full blocks read: block j ends inside hash block ((j + 1) * bs - 1) // hbs
        need = np.where(full > 0, ((full * bs - 1) // hbs) + 1, 0)
        full = np.where(need <= start[1:] - start[:-1], full, 0)
        first = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(full, out=first[1:])
        j = np.arange(int(first[-1]), dtype=np.int64) - np.repeat(first[:-1], full)
        at = np.repeat(start[:-1], full) + ((j + 1) * bs - 1) // hbs
        keys = (self._chains[at] << 32) | j
        got = (keys.tolist(), first.tolist())
        if len(self._chunks) >= KEY_CHUNKS_KEPT:
            del self._chunks[next(iter(self._chunks))]
        self._chunks[c] = got
        return got

    def _intern(self, parent: Hashable, content: Hashable) -> int:
        key = (parent, content)
        chain = self._chain
        got = chain.get(key)
        if got is None:
            got = chain[key] = len(chain)
        return got

    def prompt_keys(self, i: int) -> list[int]:
        """Request ``i``'s hashes of its leading blocks that other requests may share
        (prompt tokens only; none when its prompt is unique), memoised.

        Hashes are ints: ``>= 0`` for blocks named by their prompt content (shareable),
        ``< 0`` for blocks unique to the request (:meth:`own_key`)."""
        keys = self.keys.get(i)
        if keys is not None:
            return keys
        bs, p = self.bs, self.prompt[i]
        full = p // bs
        lo = self.lora[i]
        if self._chains is not None and self._prompt_np is not None:  # by chunk
            c, k = divmod(i, KEY_CHUNK)
            flat, first = self._chunk(c)
            a, b = first[k], first[k + 1]
            if b - a == full:
                keys = flat[a:b]
                self.keys[i] = keys
                return keys
        if self.hash_ids is not None:
            hbs = self.hbs
            used = (full * bs + hbs - 1) // hbs  # the ids up to its last full block's end
            if self._chains is not None:
                first = self._start[i]
                last = min(self._start[i + 1], first + used)
                chain = (self._chains[first:last] << 32).tolist()
            else:
                chain, parent = [], ("lora", lo)
                interned = self._chain  # _intern, inlined
                for h in self.hash_ids[i][:used]:
                    key = (parent, h)
                    parent = interned.get(key)
                    if parent is None:
                        parent = interned[key] = len(interned)
                    chain.append(parent << 32)
            # block j ends at token (j+1)*bs - 1, inside hash block ((j+1)*bs - 1) // hbs:
            # the ids up to there and the position fix every token before its end
            if hbs % bs == 0:  # hbs // bs blocks per id
                r = hbs // bs
                keys = [chain[j // r] | j for j in range(full)]
            else:
                keys = [chain[((j + 1) * bs - 1) // hbs] | j for j in range(full)]
        elif self.token_ids is not None:
            tokens, keys, parent = self.token_ids[i], [], ("lora", lo)
            for j in range(full):
                parent = self._intern(parent, tuple(tokens[j * bs : (j + 1) * bs]))
                keys.append(parent)
        else:
            keys = []  # every block its own
        self.keys[i] = keys
        return keys

    @staticmethod
    def own_key(i: int, j: int) -> int:
        """The hash of request ``i``'s block ``j`` when no other request has that block."""
        return -((i << 32) | j) - 1

    def key(self, i: int, j: int) -> int:
        """The hash of request ``i``'s block ``j`` (its tokens must exist)."""
        keys = self.prompt_keys(i)
        if j < len(keys):
            return keys[j]
        return -((i << 32) | j) - 1  # this request's own (output tokens, or a unique prompt)

    @property
    def all_unique(self) -> bool:
        """No prompt can share a block with another (no hash_ids, no token ids)."""
        return self.hash_ids is None and self.token_ids is None

    def forget(self, i: int) -> None:
        """Drop request ``i``'s memoised hashes (it finished)."""
        self.keys.pop(i, None)


class PrefixPool:
    """vLLM's ``BlockPool`` with caching on: ``usable`` blocks (the null block apart; None:
    unlimited), each with a reference count and at most one cached hash.

    The free-block queue is ``front + fresh + back``: blocks freed without a hash are
    prepended (``free_blocks``' LIFO; they are alike, so ``front`` is a stack), never-used
    blocks follow in id order, cached blocks freed are appended (LRU eviction from the
    front). A run of freed blocks whose hashes nothing can look up again (a finished
    request's own blocks) is held in ``back`` as one entry, a count (its key < 0), with their
    ids in ``anon``: they are alike too, and evicting them is taking them."""

    def __init__(self, usable: int | None) -> None:
        self.front: list[int] = []
        self.back: OrderedDict[int, int] = OrderedDict()  # block id -> 0, or run key -> count
        self.n_back = 0  # blocks in back
        self.anon: list[int] = []  # the ids of the blocks counted in back's runs
        self._runs = 0  # run keys handed out (-1, -2, ...)
        self.fresh_next = 1  # block 0 is vLLM's null block
        self.fresh_end = _INF if usable is None else usable + 1
        self.ref: list[int] = [0]  # per block id
        self.hash: list[Hashable | None] = [None]
        self.cached: dict[Hashable, int] = {}  # hash -> the first block cached under it
        self.dups: dict[Hashable, list[int]] = {}  # hash -> every block under it, if several

    def num_free(self) -> int:
        return len(self.front) + (self.fresh_end - self.fresh_next) + self.n_back

    def evictable(self, blocks: Sequence[int]) -> int:
        """Hit blocks in the free queue (``_get_num_evictable_blocks``)."""
        return list(map(self.ref.__getitem__, blocks)).count(0)

    def touch(self, blocks: Sequence[int]) -> int:
        """``BlockPool.touch``: one more reference each; the blocks newly in use (count)."""
        ref, back = self.ref, self.back
        taken = 0
        for b in blocks:
            if ref[b] == 0:
                del back[b]  # a cached block in the free queue sits in back, by itself
                taken += 1
            ref[b] += 1
        self.n_back -= taken
        return taken

    def get_new_blocks(self, n: int) -> list[int]:
        """``get_new_blocks``: ``n`` blocks from the queue's front, their hashes evicted."""
        if n <= 0:
            return []
        front, ref = self.front, self.ref
        if front:
            if n <= len(front):
                out = front[-n:]
                del front[-n:]
                for b in out:
                    ref[b] = 1
                return out
            out = front[:]
            front.clear()
            n -= len(out)
            for b in out:
                ref[b] = 1
        else:
            out = []
        fresh = self.fresh_end - self.fresh_next
        if fresh:
            if fresh > n:
                fresh = n
            first = self.fresh_next
            self.fresh_next = first + fresh
            ref.extend([1] * fresh)
            self.hash.extend([None] * fresh)
            out.extend(range(first, first + fresh))
            n -= fresh
            if not n:
                return out
        back, hashes, anon, cached, dups = self.back, self.hash, self.anon, self.cached, self.dups
        self.n_back -= n
        popitem = back.popitem
        append = out.append
        while n:
            key, count = popitem(False)
            if key < 0:  # a run of blocks nothing can hit
                take = count if count <= n else n
                got = anon[-take:]
                del anon[-take:]
                if take < count:
                    back[key] = count - take
                    back.move_to_end(key, False)
                for b in got:
                    ref[b] = 1
                out.extend(got)
                n -= take
                continue
            # a cached block by itself: _maybe_evict_cached_block (it has a hash, and unless
            # it has duplicates it is the block the map holds under it)
            h = hashes[key]
            if dups and h in dups:
                self.evict(key)
            else:
                hashes[key] = None
                if cached.pop(h) != key:
                    raise RuntimeError(f"prefix cache: block {key} was not in the hash map")
            ref[key] = 1
            append(key)
            n -= 1
        return out

    def evict(self, b: int) -> None:
        """Block ``b``'s hash out of the map (``_maybe_evict_cached_block``)."""
        key = self.hash[b]
        self.hash[b] = None
        dups = self.dups.get(key)
        if dups is None:
            if self.cached.get(key) == b:
                del self.cached[key]
            return
        if b in dups:
            dups.remove(b)
            self.cached[key] = dups[0]
            if len(dups) == 1:
                del self.dups[key]

    def insert(self, key: Hashable, b: int) -> None:
        """Cache block ``b`` under ``key`` (``_insert_block_hash``)."""
        if self.hash[b] is not None:
            return  # cached already (only ever under this key)
        self.hash[b] = key
        first = self.cached.setdefault(key, b)
        if first != b:
            self.add_dup(key, first, b)

    def add_dup(self, key: Hashable, first: int, b: int) -> None:
        """Block ``b`` cached under ``key`` besides ``first`` (found first while it lasts)."""
        dups = self.dups.get(key)
        if dups is None:
            self.dups[key] = [first, b]
        else:
            dups.append(b)

    def free(
        self,
        blocks: Sequence[int],
        dead_from: int = _INF,
        dead_cached: int = 0,
        dead_hashed: bool = True,
    ) -> int:
        """``free_blocks`` of a request's blocks in reverse (tail first); the blocks that
        are no longer in use (count). ``blocks[dead_from:]`` are the finished request's own
        (one reference each), the first ``dead_cached`` of them cached: nothing can hit them
        again, so they go to ``back`` as one run, their hashes dropped (``dead_hashed``:
        some may have one; if not, their reference counts are left for the next taker)."""
        ref, hashes = self.ref, self.hash
        released = 0
        if dead_from < len(blocks):
            own = blocks[dead_from:]
            if dead_hashed:
                for b in own:
                    if hashes[b] is not None:
                        self.evict(b)
                    ref[b] = 0
            self.front.extend(own[dead_cached:])  # order is immaterial in front
            cached_own = own[:dead_cached]
            if cached_own:
                back = self.back
                last_key = next(reversed(back)) if back else 0
                if last_key < 0:
                    back[last_key] += len(cached_own)
                else:
                    self._runs -= 1
                    back[self._runs] = len(cached_own)
                self.anon.extend(cached_own)
                self.n_back += len(cached_own)
            released = len(own)
            blocks = blocks[:dead_from]
        front, back = self.front, self.back
        nf, nb = len(front), len(back)
        for b in reversed(blocks):
            r = ref[b] - 1
            ref[b] = r
            if not r:
                if hashes[b] is None:
                    front.append(b)
                else:
                    back[b] = 0  # a cached block: to the queue's end, by itself
        nb = len(back) - nb
        self.n_back += nb
        return released + len(front) - nf + nb
