"""Lesson 04's tasks, graded on the implementation MINICB_IMPL picks (make test: the solutions).
Task 1, the allocator, is graded a pair of methods at a time (allocate, append, free: only that pair yours, the
others minicb's PagedAllocator's, run on your instance, whose state your __init__ sets the same), and then with
every method yours. Two kinds of check for each:
- the contract: random pools and random sequences of calls (hypothesis), tables that share blocks
  included, as prefix caching makes them; every result is checked against the rules in the stub's
  docstring and against minicb's own result on the same calls. A failure names the rule, says what
  your method did, and tells the smallest case hypothesis found, call by call;
- the outcome: the engine serving on your methods under memory pressure, with preemption, swapping,
  an abort and prefix caching, its pool's invariants checked after every step, against minicb's run.
Each check takes the allocator it grades, so tests/graders/ can show that plausible mistakes fail."""
from __future__ import annotations

import copy
import re
from collections.abc import Callable

import pytest
from grading import ids, simulated_engine
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from minicb import course
from minicb.engine import LLMEngine
from minicb.course.pool_rules import check_pool
from minicb.kv.block_manager import BlockManager
from minicb.kv.paged_allocator import NoFreeBlocks, PagedAllocator
from minicb.parts import EngineParts
from minicb.sampling import SamplingParams

mine = course.lesson("lesson04_paged_kv")
# Task 1 is the whole allocator. Its checks also grade one pair of methods at a time (the others minicb's), so that
# a learner who has written allocate sees it graded before append_slots and free are written.
PART_METHODS = {"allocate": ("can_allocate", "allocate"), "append": ("can_append", "append_slots"), "free": ("free",)}
WHOLE = "allocator"
# minicb's methods as imported, for the reference runs: the fixture below makes PagedAllocator's own refuse to run.
MINICB = type("MinicbPagedAllocator", (), {name: value for name, value in vars(PagedAllocator).items()
                                            if name not in ("__dict__", "__weakref__")})


def parts_of(part: str) -> tuple[str, ...]:
    return tuple(PART_METHODS) if part == WHOLE else (part,)


def graded(part: str, allocator: type | None = None) -> type:
    """`allocator` (yours unless given) with only `part`'s methods its own (all of them for WHOLE): minicb's for
    the others."""
    allocator = allocator or mine.PagedAllocator
    others = {name: getattr(MINICB, name) for p, names in PART_METHODS.items() if p not in parts_of(part)
              for name in names}
    return type(f"{allocator.__name__}{part.title()}", (allocator,), others)


@pytest.fixture(autouse=True)
def graded_methods_do_their_own_work(request, monkeypatch):
    """While a part is graded, minicb's methods of that part refuse to run, so yours cannot inherit or call
    them. (The reference is minicb's own class, so it is exempt.)"""
    part = re.match(rf"test_lesson04_task1_({'|'.join([*PART_METHODS, WHOLE])})_", request.node.name)
    if part is None or mine.PagedAllocator is PagedAllocator:
        return
    for name in (name for p in parts_of(part.group(1)) for name in PART_METHODS[p]):
        def refuse(*args, name=name, **kwargs):
            raise AssertionError(f"PagedAllocator.{name} must do the work itself, not call or inherit minicb's")
        monkeypatch.setattr(PagedAllocator, name, refuse)


# --- the contract, on random calls ----------------------------------------------------------------

SEQS = "abcdef"
POOLS = st.tuples(st.integers(1, 6), st.sampled_from([1, 2, 4]), st.integers(1, 4))   # blocks, block size, swap
# A call's `pick` chooses among the sequences holding blocks (append, share's source, swap_out, free), or
# among all names (allocate: a name that holds blocks must be refused).
# keep_free may be negative: the BlockManager lowers it by the cached blocks it could evict (lesson 10).
ALLOCATE = st.tuples(st.just("allocate"), st.integers(0, 5), st.integers(0, 10), st.sampled_from([0, 0, 7, 12]),
                     st.integers(-2, 3))
APPEND = st.tuples(st.just("append"), st.integers(0, 5), st.integers(1, 9), st.integers(-2, 3))
SHARE = st.tuples(st.just("share"), st.integers(0, 5), st.integers(1, 3), st.integers(0, 6))
FREE = st.tuples(st.just("free"), st.integers(0, 5))
FREE_UNHELD = st.tuples(st.just("free_unheld"), st.integers(0, 5))   # freed already, or never allocated
# Swapping out once is enough to meet free's swapped case; the rest of the calls are drawn twice as often.
OPS = st.lists(st.one_of(ALLOCATE, ALLOCATE, APPEND, APPEND, SHARE, SHARE, FREE, FREE, FREE_UNHELD,
                         st.tuples(st.just("swap_out"), st.integers(0, 5))), min_size=3, max_size=20)


# Cases every run tries first, besides the random ones: a free of a table that shares blocks (and of the one
# it shares them with), a free of a swapped sequence, a second free of one sequence, growth on a full pool into
# a block that has room, keep_free when it decides, a sequence of 0 tokens, growth past an exact block boundary,
# and a table reserved ahead (more blocks than its tokens fill) asked about growth on an empty pool. (pool,
# calls), the calls as OPS draws them.
FIRST_CASES = [
    ((6, 2, 2), [("allocate", 0, 5, 0, 0), ("share", 0, 2, 1), ("append", 1, 2, 0), ("free", 0), ("free", 0)]),
    ((6, 2, 2), [("allocate", 0, 4, 0, 0), ("share", 0, 2, 3), ("free", 1), ("free", 0)]),
    ((4, 2, 2), [("allocate", 0, 3, 0, 0), ("allocate", 1, 1, 0, 0), ("swap_out", 0), ("free", 0), ("free", 0)]),
    ((2, 2, 0), [("allocate", 0, 3, 0, 0), ("free", 0), ("free_unheld", 0)]),
    ((2, 4, 1), [("allocate", 0, 3, 0, 0), ("allocate", 1, 4, 0, 0), ("append", 0, 1, 0), ("append", 1, 1, 0),
                 ("append", 0, 1, 0)]),
    ((4, 2, 1), [("allocate", 0, 4, 0, 2), ("allocate", 1, 2, 0, 2), ("append", 0, 1, 1), ("append", 0, 1, 2),
                 ("allocate", 2, 1, 0, 1), ("allocate", 3, 0, 4, 0)]),
    ((4, 2, 1), [("allocate", 0, 2, 0, 0), ("append", 0, 1, 0), ("allocate", 1, 0, 0, 0), ("append", 1, 2, 0),
                 ("allocate", 2, 4, 0, 0)]),
    ((4, 2, 1), [("allocate", 0, 1, 7, 0), ("append", 0, 1, 1), ("append", 0, 2, -1), ("free", 0)]),
]


class State:
    """A copy of the pool's state, to compare before and after a call, and with minicb's."""
    FIELDS = ("free_blocks", "ref_counts", "tables", "num_tokens", "free_swap_blocks", "swapped")

    def __init__(self, pool):
        self.free_blocks, self.ref_counts = list(pool.free_blocks), list(pool.ref_counts)
        self.tables = {s: list(t) for s, t in pool.tables.items()}
        self.num_tokens, self.free_swap_blocks = dict(pool.num_tokens), list(pool.free_swap_blocks)
        self.swapped = {s: list(b) for s, b in pool.swapped.items()}

    def differences(self, other: State) -> list[str]:
        return [f"{name} is {getattr(self, name)}, not {getattr(other, name)}" for name in self.FIELDS
                if getattr(self, name) != getattr(other, name)]

    def holders(self, block: int, but: str) -> list[str]:
        return [s for s, table in self.tables.items() if s != but and block in table]


class Trial:
    """One random case: the same calls on a BlockManager over the graded allocator and on one over minicb's,
    in step; after each call, the graded part's rules are checked on yours, then yours must equal minicb's."""

    def __init__(self, part: str, allocator: type, num_blocks: int, block_size: int, num_swap_blocks: int):
        self.checked, self.block_size = parts_of(part), block_size
        self.yours = BlockManager(num_blocks, block_size, num_swap_blocks=num_swap_blocks, allocator=allocator)
        self.minicb = BlockManager(num_blocks, block_size, num_swap_blocks=num_swap_blocks, allocator=MINICB)
        self.story = [f"a pool of {num_blocks} blocks of {block_size} slots, {num_swap_blocks} swap blocks"]

    def broke(self, rule: str, what: str, error: Exception | None = None) -> None:
        calls = "\n  ".join(self.story)
        raise AssertionError(f"{rule}: {what}.\nThe case (hypothesis shrinks a random one), call by call:\n  {calls}") \
            from error

    def call(self, what: str, method: Callable, *args,
             refusals: tuple[type[Exception], ...] = (NoFreeBlocks, ValueError)):
        """Your call's result, or the refusal it raised; any other error fails, naming the call."""
        try:
            return method(*args)
        except NotImplementedError:
            raise
        except refusals as refusal:
            return refusal
        except Exception as error:   # noqa: BLE001 - the learner's error, shown with its traceback
            self.broke(f"{what} returns a result or refuses with {'/'.join(r.__name__ for r in refusals)}",
                       f"it raised {type(error).__name__}: {error}", error)

    def run(self, ops: list[tuple]) -> None:
        for op, pick, *args in ops:
            ref = self.minicb
            on_device = [seq for seq in SEQS if seq in ref.tables]
            held = [seq for seq in SEQS if seq in ref.swapped] + on_device   # the swapped first: free meets them
            unheld = [seq for seq in SEQS if seq not in held]
            if op == "allocate":
                self.allocate(SEQS[pick], *args)
            elif op == "append" and on_device:
                self.append(on_device[pick % len(on_device)], *args)
            elif op == "share" and on_device and unheld:
                self.share(unheld[0], on_device[pick % len(on_device)], *args)
            elif op == "swap_out" and on_device and ref.can_swap_out(seq := on_device[pick % len(on_device)]):
                self.story.append(f"{seq!r} is swapped out (by minicb): its {len(ref.tables[seq])} block(s) go to "
                                  "the CPU pool")
                self.yours.swap_out(seq)
                ref.swap_out(seq)
            elif op == "free" and held:
                self.free(held[pick % len(held)])
            elif op == "free_unheld" and unheld:
                self.free_unheld(unheld[pick % len(unheld)])
            else:
                continue
            differences = State(self.yours).differences(State(self.minicb))
            if differences:
                self.broke("the pool after each call is the one minicb's PagedAllocator leaves",
                           "yours differs from minicb's: " + "; ".join(differences))

    def must_agree(self, what: str, yours, reference) -> None:
        if type(yours) is not type(reference) or (not isinstance(yours, Exception) and yours != reference):
            self.broke(f"{what} gives minicb's result", f"it gave {shown(yours)} where minicb's gives {shown(reference)}")

    def ask(self, question: str, method: str, args: tuple, then: str, then_args: tuple,
            keep_free: int) -> Callable[[], None]:
        """can_allocate / can_append: a bool that changes nothing, and True exactly when the call it asks about
        would succeed with keep_free blocks left free (tried on a copy of your pool). Returns that last check,
        to run after the call itself has been checked: a wrong call is the call's fault, not the question's."""
        before = State(self.yours.allocator)
        answer = self.call(question, getattr(self.yours.allocator, method), *args, keep_free)
        self.story.append(f"{question} -> {shown(answer)}")
        if not isinstance(answer, bool):
            self.broke(f"{method} answers True or False", f"it returned {shown(answer)}")
        changed = State(self.yours.allocator).differences(before)
        if changed:
            self.broke(f"{method} changes nothing", "; ".join(changed))
        # keep_free < 0: that many blocks may be missing (the BlockManager evicts as many cached ones first),
        # tried as that many more free blocks on the copy.
        trial_pool, spare = copy.deepcopy(self.yours.allocator), max(0, -keep_free)
        trial_pool.free_blocks.extend(range(trial_pool.num_blocks, trial_pool.num_blocks + spare))
        trial_pool.ref_counts.extend([0] * spare)
        result = self.call(f"{then} (on a copy of your pool)", getattr(trial_pool, then), *then_args)
        fits = not isinstance(result, Exception) and len(trial_pool.free_blocks) >= keep_free + spare
        missing = f" with {spare} more block(s) free" if spare else ""

        def agrees() -> None:
            if answer != fits:
                outcome = f"raises {shown(result)}" if isinstance(result, Exception) else \
                    f"succeeds and leaves {len(trial_pool.free_blocks)} free"
                self.broke(f"{method} is True exactly when {then} would succeed and leave keep_free={keep_free} "
                           "blocks free (below 0: when it would be short by at most -keep_free blocks)",
                           f"{question} said {answer}, but {then}{then_args}{missing} {outcome}")
        return agrees

    def allocate(self, seq: str, num_tokens: int, reserve: int, keep_free: int) -> None:
        question = f"can_allocate({num_tokens}, reserve_tokens={reserve}, keep_free={keep_free})"
        if "allocate" in self.checked:
            fresh = "new"   # a sequence no one holds, so that the copy's allocate asks only about room
            agrees = self.ask(question, "can_allocate", (num_tokens, reserve), "allocate",
                              (fresh, num_tokens, reserve), keep_free)
        answers = (self.yours.can_allocate(num_tokens, reserve, keep_free),
                   self.minicb.can_allocate(num_tokens, reserve, keep_free))
        before = State(self.yours.allocator)
        what = f"allocate({seq!r}, {num_tokens}, reserve_tokens={reserve})"
        table = self.call(what, self.yours.allocate, seq, num_tokens, reserve)
        reference = self.call(what, self.minicb.allocate, seq, num_tokens, reserve)
        self.story.append(f"{what} -> {shown(table)}")
        if "allocate" in self.checked:
            self.check_allocate(seq, num_tokens, max(num_tokens, reserve), table, before)
            agrees()
        self.must_agree(question, *answers)
        self.must_agree(what, table, reference)

    def check_allocate(self, seq: str, num_tokens: int, room: int, table, before: State) -> None:
        after, size = State(self.yours.allocator), self.block_size
        if isinstance(table, Exception):
            if seq in before.tables or seq in before.swapped:
                where = "on the device" if seq in before.tables else "swapped out"
                if not isinstance(table, ValueError):
                    self.broke("allocate refuses a sequence that holds blocks with ValueError",
                               f"{seq!r} holds blocks ({where}), and it raised {shown(table)}")
            elif fewest_blocks(room, size) <= len(before.free_blocks):
                self.broke("allocate refuses with NoFreeBlocks only when too few blocks are free",
                           f"it raised {shown(table)}, but {fewest_blocks(room, size)} block(s) of {size} hold {room} "
                           f"tokens and {len(before.free_blocks)} are free")
            if after.differences(before):
                self.broke("a refused allocate changes nothing", "; ".join(after.differences(before)))
            return
        if seq in before.tables or seq in before.swapped:
            self.broke("allocate refuses a sequence that holds blocks with ValueError",
                       f"{seq!r} holds blocks ({'on the device' if seq in before.tables else 'swapped out'}), and it "
                       f"returned {shown(table)}")
        if not isinstance(table, list) or after.tables.get(seq) != table:
            self.broke("allocate returns the table it records in tables[seq_id]",
                       f"it returned {shown(table)}, and tables[{seq!r}] is {after.tables.get(seq)}")
        if len(table) * size < room:
            self.broke(f"the table has a slot for each of max(num_tokens, reserve_tokens) = {room} tokens",
                       f"its {len(table)} blocks of {size} hold {len(table) * size}")
        if table and (len(table) - 1) * size >= room:
            self.broke(f"the table is the fewest blocks that hold {room} tokens",
                       f"it took {len(table)} blocks of {size}, and {len(table) - 1} hold {(len(table) - 1) * size}")
        taken = len(table)
        if table != before.free_blocks[:taken] or after.free_blocks != before.free_blocks[taken:]:
            self.broke("its blocks are the ones at the left of free_blocks, in order, and leave it",
                       f"free_blocks was {before.free_blocks}; it took {table} and left {after.free_blocks}")
        self.check_holders(seq, table, before, after, "allocate")
        if after.num_tokens.get(seq) != num_tokens:
            self.broke("num_tokens[seq_id] is num_tokens, the tokens and not the reserve",
                       f"num_tokens[{seq!r}] is {after.num_tokens.get(seq)}, not {num_tokens}")
        self.check_others(seq, before, after, "allocate")

    def check_holders(self, seq: str, taken: list[int], before: State, after: State, what: str) -> None:
        for block in taken:
            if after.ref_counts[block] != before.ref_counts[block] + 1:
                self.broke(f"a block {what} takes counts {seq!r} as one more holder: its ref count is the number "
                           "of sequences holding it",
                           f"block {block}'s ref count went from {before.ref_counts[block]} to "
                           f"{after.ref_counts[block]}")
        others = [b for b in range(len(before.ref_counts)) if b not in taken
                  and after.ref_counts[b] != before.ref_counts[b]]
        if others:
            self.broke(f"{what} changes the ref counts of the blocks it takes and no other",
                       f"block {others[0]}'s went from {before.ref_counts[others[0]]} to {after.ref_counts[others[0]]}")

    def check_others(self, seq: str, before: State, after: State, what: str) -> None:
        for name in ("tables", "num_tokens", "swapped"):
            mine_, was = getattr(after, name), getattr(before, name)
            changed = sorted(s for s in mine_.keys() | was.keys() if s != seq and mine_.get(s) != was.get(s))
            if changed:
                self.broke(f"{what}({seq!r}) changes no other sequence",
                           f"{name}[{changed[0]!r}] went from {was.get(changed[0])} to {mine_.get(changed[0])}")

    def append(self, seq: str, num_new: int, keep_free: int) -> None:
        question = f"can_append({seq!r}, {num_new}, keep_free={keep_free})"
        if "append" in self.checked:
            agrees = self.ask(question, "can_append", (seq, num_new), "append_slots", (seq, num_new), keep_free)
        answers = (self.yours.can_append(seq, num_new, keep_free), self.minicb.can_append(seq, num_new, keep_free))
        before = State(self.yours.allocator)
        what = f"append_slots({seq!r}, {num_new})"
        table = self.call(what, self.yours.append_slots, seq, num_new)
        table = list(table) if isinstance(table, list) else table   # the live table: copy it before comparing
        reference = self.call(what, self.minicb.append_slots, seq, num_new)
        self.story.append(f"{what} -> {shown(table)}")
        if "append" in self.checked:
            self.check_append(seq, num_new, table, before)
            agrees()
        self.must_agree(question, *answers)
        self.must_agree(what, table, reference)

    def check_append(self, seq: str, num_new: int, table, before: State) -> None:
        after, size = State(self.yours.allocator), self.block_size
        if isinstance(table, Exception):
            if not isinstance(table, NoFreeBlocks):
                self.broke("append_slots refuses only with NoFreeBlocks", f"it raised {shown(table)}")
            old, tokens = before.tables[seq], before.num_tokens[seq] + num_new
            missing = fewest_blocks(tokens, size) - len(old)
            if missing <= len(before.free_blocks):
                self.broke("a new block only when the last one is full, so append_slots refuses only when the "
                           "blocks the tokens need are not free",
                           f"it raised {shown(table)}, but the table's {len(old)} block(s) of {size} and "
                           f"{max(0, missing)} more hold its {tokens} tokens, and {len(before.free_blocks)} are free")
            if after.differences(before):
                self.broke("a refused append_slots changes nothing", "; ".join(after.differences(before)))
            return
        old, new, tokens = before.tables[seq], after.tables.get(seq), before.num_tokens[seq] + num_new
        if table != new:
            self.broke("append_slots returns the table, tables[seq_id]", f"it returned {table}, tables has {new}")
        if after.num_tokens.get(seq) != tokens:
            self.broke("num_tokens[seq_id] grows by num_new_tokens",
                       f"it went from {before.num_tokens[seq]} to {after.num_tokens.get(seq)}, not {tokens}")
        if new[:len(old)] != old:
            self.broke("the blocks the table had stay, in place: they hold its K/V, and may be shared",
                       f"the table was {old} and is {new}")
        if len(new) * size < tokens:
            self.broke(f"the table has a slot for each of its {tokens} tokens",
                       f"its {len(new)} blocks of {size} hold {len(new) * size}")
        if len(new) > len(old) and (len(new) - 1) * size >= tokens:
            self.broke("a new block only when the last one is full: append_slots adds a block only where the "
                       "tokens would not fit without it",
                       f"{len(new) - 1} blocks of {size} hold the {tokens} tokens, and it added a block: the table "
                       f"went from {old} to {new}")
        gained = new[len(old):]
        if gained != before.free_blocks[:len(gained)] or after.free_blocks != before.free_blocks[len(gained):]:
            self.broke("a block it adds is the one at the left of free_blocks, and leaves it",
                       f"free_blocks was {before.free_blocks}; it added {gained} and left {after.free_blocks}")
        self.check_holders(seq, gained, before, after, "append_slots")
        self.check_others(seq, before, after, "append_slots")

    def share(self, seq: str, source: str, num_shared: int, num_new: int) -> None:
        """seq starts with source's first full blocks, as a prefix-cache hit makes it (BlockManager.allocate,
        minicb's, which calls your allocate and append_slots), and num_new tokens after them."""
        ref = self.minicb
        if source not in ref.tables or source not in self.yours.tables:
            return
        num_shared = min(num_shared, ref.num_tokens[source] // self.block_size)
        blocks = ref.tables[source][:num_shared]
        if not blocks or self.yours.tables[source][:num_shared] != blocks:
            return
        ref.set_prefix_hit(seq, list(blocks))
        if not ref.can_allocate(num_new):
            ref.set_prefix_hit("", [])
            return
        what = f"{seq!r} starts with the first {num_shared} block(s) of {source!r}, {blocks} (a prefix hit), then " \
               f"{num_new} token(s) of its own"
        self.yours.set_prefix_hit(seq, list(blocks))
        table = self.call(what, self.yours.allocate, seq, num_new)
        reference = ref.allocate(seq, num_new)
        self.story.append(f"{what} -> {shown(table)}")
        if isinstance(table, Exception) or table == reference:
            return
        # BlockManager.allocate made the table: your allocate(seq, 0), the shared blocks put in front, then
        # your append_slots(seq, num_new). Name the rule the graded method broke, not only the difference.
        how = (f"a prefix hit's table is made by allocate({seq!r}, 0), the {num_shared} shared block(s) put in "
               f"front, then append_slots({seq!r}, {num_new}); it came out {table}, minicb's {reference}")
        tokens, size = self.yours.num_tokens[seq], self.block_size
        if "allocate" in self.checked and len(table) > len(reference):
            self.broke("the table is the fewest blocks that hold 0 tokens: none", how)
        if "append" in self.checked and len(table) * size < tokens:
            self.broke(f"the table has a slot for each of its {tokens} tokens",
                       f"its {len(table)} blocks of {size} hold {len(table) * size}: {how}")

    def free(self, seq: str) -> None:
        before = State(self.yours.allocator)
        result = self.call(f"free({seq!r})", self.yours.free, seq)
        self.minicb.free(seq)
        shared = {b: before.holders(b, seq) for b in before.tables.get(seq, []) if before.holders(b, seq)}
        self.story.append(f"free({seq!r})" + (f", whose block(s) {sorted(shared)} other tables hold too"
                                              if shared else ""))
        if "free" in self.checked:
            self.check_free(seq, result, before, shared)

    def free_unheld(self, seq: str) -> None:
        before = State(self.yours.allocator)
        self.story.append(f"free({seq!r}), which holds no blocks")
        result = self.call(f"free({seq!r})", self.yours.free, seq, refusals=(KeyError,))
        with pytest.raises(KeyError):
            self.minicb.free(seq)
        if "free" in self.checked:
            if not isinstance(result, KeyError):
                self.broke(FREE_UNHELD_RULE, f"free({seq!r}) returned, and a second free would go unnoticed")
            changes = State(self.yours.allocator).differences(before)
            if changes:
                self.broke(FREE_UNHELD_RULE, "it refused, but changed the pool: " + "; ".join(changes))

    def check_free(self, seq: str, result, before: State, shared: dict[int, list[str]]) -> None:
        after = State(self.yours.allocator)
        if isinstance(result, Exception):
            self.broke(f"free gives back what {seq!r} holds", f"it raised {shown(result)}")
        left = [name for name in ("tables", "swapped", "num_tokens") if seq in getattr(after, name)]
        if left:
            self.broke("free forgets the sequence: no entry in tables, swapped or num_tokens",
                       f"{seq!r} is still in {' and '.join(left)}")
        if seq in before.swapped:
            cpu = before.swapped[seq]
            if after.free_swap_blocks != before.free_swap_blocks + cpu:
                self.broke("free of a swapped sequence gives its CPU blocks back to free_swap_blocks, on the right",
                           f"{seq!r} held CPU blocks {cpu}; free_swap_blocks went from {before.free_swap_blocks} to "
                           f"{after.free_swap_blocks}")
            if (after.free_blocks, after.ref_counts) != (before.free_blocks, before.ref_counts):
                self.broke("free of a swapped sequence leaves the device pool alone (it holds no device block)",
                           f"free_blocks went from {before.free_blocks} to {after.free_blocks}")
        else:
            table = before.tables[seq]
            for block in table:
                if after.ref_counts[block] != before.ref_counts[block] - 1:
                    self.broke("free takes one holder off each block of the table: its ref count is the number of "
                               "sequences holding it",
                               f"block {block}'s ref count went from {before.ref_counts[block]} to "
                               f"{after.ref_counts[block]}" + (f", and {still_hold(shared[block])} it"
                                                               if block in shared else ""))
            for block, others in shared.items():
                if block in after.free_blocks:
                    self.broke("free gives a block back only when no sequence holds it any more",
                               f"free({seq!r}) put block {block} on the free list while {still_hold(others)} it: it "
                               "would be returned twice")
            returned = [block for block in table if block not in shared]
            if after.free_blocks != before.free_blocks + returned:
                self.broke("free puts each block no one holds any more back on the right of free_blocks, in "
                           "table order",
                           f"{seq!r}'s table was {table}, of which {returned} no other table holds; free_blocks went "
                           f"from {before.free_blocks} to {after.free_blocks}")
            if after.free_swap_blocks != before.free_swap_blocks:
                self.broke("free of a sequence on the device leaves the swap pool alone",
                           f"free_swap_blocks went from {before.free_swap_blocks} to {after.free_swap_blocks}")
        self.check_others(seq, before, after, "free")


FREE_UNHELD_RULE = "free refuses a sequence that holds no blocks with KeyError, changing nothing"


def fewest_blocks(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


def shown(result) -> str:
    return f"{type(result).__name__}({result})" if isinstance(result, Exception) else repr(result)


def still_hold(seq_ids: list[str]) -> str:
    return " and ".join(repr(s) for s in seq_ids) + (" still holds" if len(seq_ids) == 1 else " still hold")


def check_contract(part: str, allocator: type, max_examples: int = 200) -> None:
    # No explain phase (it reruns each failure many times over) and no example database: a failure is the
    # smallest case found now, the same on every run.
    @settings(max_examples=max_examples, deadline=None, report_multiple_bugs=False, database=None,
              phases=[Phase.explicit, Phase.generate, Phase.shrink], suppress_health_check=[HealthCheck.too_slow])
    @given(pool=POOLS, ops=OPS)
    def random_calls(pool: tuple[int, int, int], ops: list[tuple]) -> None:
        Trial(part, graded(part, allocator), *pool).run(ops)
    for pool, ops in reversed(FIRST_CASES):
        random_calls = example(pool=pool, ops=ops)(random_calls)
    random_calls()


def check_allocate_contract(allocator: type) -> None:
    check_contract("allocate", allocator)


def check_append_contract(allocator: type) -> None:
    check_contract("append", allocator)


def check_free_contract(allocator: type) -> None:
    check_contract("free", allocator)


# --- the outcome: the engine on your methods --------------------------------------------------------

LENGTHS = [9, 3, 14, 6, 11, 2, 8]
# Seven requests on eight 4-token blocks: some must give way. With "swap", 0.05 MB is 4 CPU blocks.
ENGINES = {"recompute": dict(max_num_seqs=6, num_blocks=8, block_size=4),
           "swap": dict(max_num_seqs=6, num_blocks=8, block_size=4, preemption_mode="swap", swap_space_mb=0.05)}
# Prompts that share their first blocks (ids(n) is a prefix of ids(m) for n < m), on a pool that cannot
# hold them all: prefix hits share blocks between tables, and preemption frees tables that share them.
PREFIX_WORKLOAD = [(13, 10), (21, 6), (9, 12), (17, 8), (13, 9), (25, 5), (9, 7), (21, 11)]
PREFIX_ENGINE = dict(max_num_seqs=5, num_blocks=14, block_size=4, enable_prefix_caching=True)


def step(engine: LLMEngine) -> list:
    """One engine step; an error your methods cause in it fails, naming the rule (its traceback shows your line)."""
    try:
        return engine.step()
    except NotImplementedError:
        raise
    except Exception as error:   # noqa: BLE001 - the learner's error, shown with its traceback
        raise AssertionError(f"the engine runs on your methods without an error: at step {len(engine.trace.steps)} it "
                             f"raised {type(error).__name__}: {error} (can_append and can_allocate say what "
                             "append_slots and allocate then do?)") from error


def serve_and_check(allocator_cls: type, **config) -> None:
    """Serve LENGTHS on the engine over allocator_cls, checking the pool's invariants after every step.
    The first request seen swapped out is aborted there, so free meets a swapped sequence."""
    engine = LLMEngine(device="cpu", simulate=True, parts=EngineParts(allocator=allocator_cls), **config)
    request_ids = [engine.add_request("ROMEO.\n", SamplingParams(max_tokens=n, ignore_eos=True)) for n in LENGTHS]
    bm = engine.scheduler.kv
    lengths, aborted = {}, None
    while engine.has_unfinished_requests():
        lengths |= {o.request_id: len(o.outputs[0].token_ids) for o in step(engine) if o.finished}
        check_pool(bm)
        if aborted is None and bm.swapped:
            aborted = next(iter(bm.swapped))
            engine.abort(aborted)
            check_pool(bm)
    assert any(step.preempted for step in engine.trace.steps), "the pool was meant to be small enough to preempt"
    if config.get("preemption_mode") == "swap":
        assert aborted is not None, "a request was meant to be swapped out (and aborted there)"
    assert {i: n for i, n in zip(request_ids, LENGTHS) if i != aborted} == \
        {i: lengths.get(i) for i in request_ids if i != aborted}, "every request not aborted generates all its max_tokens"
    usage = bm.usage()
    assert usage.free_blocks == usage.num_blocks, "every device block is free again once every request is done"
    assert usage.swapped_blocks == 0, "every swap block is free again once every request is done"


def serve_with_prefix_caching(allocator_cls: type) -> None:
    """PREFIX_WORKLOAD on your allocator and on minicb's, with prefix caching on and the invariants checked
    after every step: every step must take the same decisions (whom it admits and preempts, how many tokens
    the cache saves, how many blocks stay free) and every request must get minicb's tokens."""
    runs = []
    for allocator in (allocator_cls, MINICB):
        engine = simulated_engine(EngineParts(allocator=allocator), **PREFIX_ENGINE)
        for i, (n, max_tokens) in enumerate(PREFIX_WORKLOAD):
            engine.add_request(ids(n), SamplingParams(max_tokens=max_tokens, ignore_eos=True), request_id=chr(97 + i))
        results = {}
        for _ in range(500):
            if not engine.has_unfinished_requests():
                break
            results |= {o.request_id: o.outputs[0].token_ids for o in step(engine) if o.finished}
        runs.append((engine, results))
    (yours, your_results), (reference, reference_results) = runs
    steps = reference.trace.steps
    assert any(s.preempted for s in steps) and any(s.cached_tokens for s in steps), \
        "the workload was meant to preempt and to hit the prefix cache"
    for mine_, theirs in zip(yours.trace.steps, steps):
        for what in ("admitted", "preempted", "cached_tokens", "blocks_free"):
            assert getattr(mine_, what) == getattr(theirs, what), (
                f"with prefix caching, the pool on your methods serves as minicb's does: at step {theirs.step} "
                f"{what} is {getattr(mine_, what)} on yours, {getattr(theirs, what)} on minicb's")
    assert your_results == reference_results, \
        "with prefix caching, every request gets minicb's tokens on your methods: a block shared or lost?"
    assert yours.scheduler.kv.usage().free_blocks == PREFIX_ENGINE["num_blocks"], \
        "every device block is free (or cached, unheld) once every request is done"


# --- task 1, one pair of methods at a time: can_allocate and allocate ------------------------------

def test_lesson04_task1_allocate_and_can_allocate_keep_their_contract_on_random_calls():
    check_allocate_contract(mine.PagedAllocator)


@pytest.mark.parametrize("mode", ENGINES)
def test_lesson04_task1_allocate_serves_the_engine(mode):
    serve_and_check(graded("allocate"), **ENGINES[mode])


def test_lesson04_task1_allocate_serves_with_prefix_caching_as_minicbs():
    serve_with_prefix_caching(graded("allocate"))


def test_lesson04_task1_allocate_runs_contiguous_reservation():
    bm = BlockManager(10, 4, reservation="contiguous", max_model_len=16, allocator=graded("allocate"))
    table = bm.allocate("x", 1)
    assert len(table) == 4, f"contiguous: the BlockManager passes reserve_tokens=16, so 4 blocks of 4, not {table}"
    assert bm.num_tokens["x"] == 1, "num_tokens records the tokens, not the reserve"
    check_pool(bm)


# --- task 1: can_append and append_slots ------------------------------------------------------------

def test_lesson04_task1_append_and_can_append_keep_their_contract_on_random_calls():
    check_append_contract(mine.PagedAllocator)


@pytest.mark.parametrize("mode", ENGINES)
def test_lesson04_task1_append_serves_the_engine(mode):
    serve_and_check(graded("append"), **ENGINES[mode])


def test_lesson04_task1_append_serves_with_prefix_caching_as_minicbs():
    serve_with_prefix_caching(graded("append"))


# --- task 1: free -----------------------------------------------------------------------------------

def test_lesson04_task1_free_keeps_its_contract_on_random_calls():
    check_free_contract(mine.PagedAllocator)


@pytest.mark.parametrize("mode", ENGINES)
def test_lesson04_task1_free_serves_the_engine(mode):
    serve_and_check(graded("free"), **ENGINES[mode])


def test_lesson04_task1_free_serves_with_prefix_caching_as_minicbs():
    serve_with_prefix_caching(graded("free"))


# --- task 1: the whole allocator, every method yours ---------------------------------------------------

def test_lesson04_task1_allocator_keeps_every_contract_on_random_calls():
    check_contract(WHOLE, mine.PagedAllocator)


@pytest.mark.parametrize("mode", ENGINES)
def test_lesson04_task1_allocator_serves_the_engine(mode):
    serve_and_check(graded(WHOLE), **ENGINES[mode])


def test_lesson04_task1_allocator_serves_with_prefix_caching_as_minicbs():
    serve_with_prefix_caching(graded(WHOLE))
