"""System prefixes kept in their own KV sequences (``tagql.llm.local._PrefixStates``), on the real model:
switching between them must not change a single output token, and a full cache drops old prefixes
instead of failing."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.model

SCHEMAS = {
    "heroes": "CREATE TABLE superhero (id INTEGER, superhero_name TEXT, height_cm INTEGER);",
    "clubs": "CREATE TABLE member (member_id TEXT, first_name TEXT, last_name TEXT, position TEXT);",
    "bonds": "CREATE TABLE bond (bond_id TEXT, molecule_id TEXT, bond_type TEXT);",
}


def _messages(name: str, question: str):
    from tagql.llm import system, user

    return [system(f"You write SQLite SQL for this schema:\n{SCHEMAS[name]}\nOutput only the SQL."),
            user(question)]


def _from_scratch(llm, messages, max_tokens: int = 40) -> str:
    """The reference: no stored prefix (in RAM or on disk), the whole prompt evaluated anew."""
    disk, llm._disk = llm._disk, None
    try:
        llm._prefixes.clear(llm._llama)
        llm._llama.reset()
        return llm.complete(messages, max_tokens=max_tokens).text
    finally:
        llm._disk = disk


def _llm(**kw):
    from tagql.config import load_settings
    from tagql.llm.local import LocalLLM
    from tagql.llm.model_pack import resolve_model_path

    settings = load_settings()
    return LocalLLM(resolve_model_path(settings.llm.model, settings.cache_dir), **kw)


def test_switching_prefixes_reuses_them_and_keeps_outputs_identical() -> None:
    llm = _llm()
    asks = [("heroes", "Names of superheroes taller than 200 cm."), ("clubs", "First names of presidents."),
            ("heroes", "How many superheroes are there?"), ("clubs", "Last names of all members.")]
    expected = [_from_scratch(llm, _messages(n, q)) for n, q in asks]
    hits = llm._prefixes.hits
    got = [llm.complete(_messages(n, q), max_tokens=40).text for n, q in asks]
    assert got == expected
    assert llm._prefixes.hits - hits >= 2  # the 3rd and 4th calls found their schema already evaluated
    assert len(llm._prefixes._slots) + len(llm._prefixes._cold) == 2


def test_a_full_cache_spills_the_oldest_prefix_and_still_answers() -> None:
    llm = _llm(n_ctx=256)  # room for about two of these prompts at once
    order = ["heroes", "clubs", "bonds", "heroes", "bonds"]
    expected = {n: _from_scratch(llm, _messages(n, "List every column."), 24) for n in SCHEMAS}
    for name in order:
        assert llm.complete(_messages(name, "List every column."), max_tokens=24).text == expected[name]
        assert sum(len(k) for k in llm._prefixes._slots) <= llm.n_ctx


def test_prefixes_beyond_the_hot_ones_are_reloaded_from_ram_not_recomputed() -> None:
    llm = _llm()
    question = "How many rows are there?"
    expected = {n: _from_scratch(llm, _messages(n, question)) for n in SCHEMAS}
    llm._prefixes.clear(llm._llama)
    misses, hits = llm._prefixes.misses, llm._prefixes.hits
    for name in ["heroes", "clubs", "bonds", "heroes", "clubs"]:  # 3 prefixes, 2 hot sequences
        assert llm.complete(_messages(name, question), max_tokens=40).text == expected[name]
    assert llm._prefixes.misses - misses == 3  # each schema evaluated once
    assert llm._prefixes.hits - hits == 2  # heroes and clubs came back from their spilled state
    assert len(llm._prefixes._slots) + len(llm._prefixes._cold) == 3


def test_a_prefix_that_cannot_be_reloaded_is_evaluated_again(monkeypatch) -> None:
    """A failed reload (or a batch that finds no room) clears the stored prefixes and retries once."""
    llm = _llm()
    question = "How many rows are there?"
    expected = _from_scratch(llm, _messages("bonds", question))
    llm.complete(_messages("heroes", question), max_tokens=8)
    llm.complete(_messages("clubs", question), max_tokens=8)
    llm.complete(_messages("heroes", question), max_tokens=8)
    bonds_prefix = tuple(llm._prompt(_messages("bonds", question), 40)[2])
    assert bonds_prefix in llm._prefixes._cold  # spilled to RAM: the next bonds call reloads it
    failures = []

    def broken_reload(llama, key):
        failures.append(key)
        raise RuntimeError("llama.cpp could not reload a saved prefix")

    monkeypatch.setattr(llm._prefixes, "_reload", broken_reload)
    misses = llm._prefixes.misses
    assert llm.complete(_messages("bonds", question), max_tokens=40).text == expected
    assert len(failures) == 1 and llm._prefixes.misses == misses + 1  # cleared, then evaluated anew


def test_reloading_a_spilled_prefix_never_evicts_that_prefix_first() -> None:
    """With more prefixes than ``max_states``, making room for a reload spills the hot ones; the RAM
    eviction that follows must drop another prefix, not the one being reloaded (it was a KeyError)."""
    from tagql.llm.local import _PrefixStates

    llm = _llm()
    question = "How many rows are there?"
    expected = {n: _from_scratch(llm, _messages(n, question)) for n in SCHEMAS}
    llm._prefixes.clear(llm._llama)
    llm._prefixes = _PrefixStates(max_states=2, hot=2)
    for name in ["heroes", "clubs", "bonds", "heroes", "clubs", "bonds", "heroes"]:
        assert llm.complete(_messages(name, question), max_tokens=40).text == expected[name]
    assert len(llm._prefixes._slots) + len(llm._prefixes._cold) <= 3


def test_an_evaluated_prefix_is_reused_from_disk_by_a_new_process(tmp_path) -> None:
    """The schema prefix's KV state is written once; a process that starts empty reads it instead of
    evaluating the schema (same output), and a damaged file is evaluated again and rewritten."""
    from tagql.llm import system, user
    from tagql.llm.local import _DiskStates

    llm = _llm()
    prefixes = llm._prefixes
    llm._disk = _DiskStates(tmp_path)
    notes = "\n".join(f"-- note {i}: superhero heights are stored in centimetres" for i in range(8))
    messages = [system(f"You write SQLite SQL for this schema:\n{SCHEMAS['heroes']}\n{notes}\nOutput only the SQL."),
                user("How many superheroes are taller than 200 cm?")]
    reference = _from_scratch(llm, messages)
    prefixes.clear(llm._llama)
    llm._llama.reset()
    first = llm.complete(messages, max_tokens=40).text  # evaluated, then written to disk
    assert first == reference
    files = list(tmp_path.glob("*.kv"))
    assert len(files) == 1
    size = files[0].stat().st_size
    prefixes.clear(llm._llama)  # what a new process starts with
    llm._llama.reset()
    disk_hits, misses = prefixes.disk_hits, prefixes.misses
    assert llm.complete(messages, max_tokens=40).text == first
    assert (prefixes.disk_hits, prefixes.misses) == (disk_hits + 1, misses)

    files[0].write_bytes(files[0].read_bytes()[: size // 2])  # cut short
    prefixes.clear(llm._llama)
    llm._llama.reset()
    assert llm.complete(messages, max_tokens=40).text == first
    assert prefixes.misses == misses + 1 and files[0].stat().st_size == size

    # another LocalLLM of the same loaded model, without a state folder, neither reads nor writes one
    other = _llm()
    other._prefixes.clear(other._llama)
    other._llama.reset()
    hits = prefixes.disk_hits
    assert other.complete(messages, max_tokens=40).text == first
    assert prefixes.disk_hits == hits
    assert other.complete([system(messages[0].content + "\n-- one more note"), messages[1]], max_tokens=40).text
    assert len(list(tmp_path.glob("*.kv"))) == 1


def test_disk_states_are_readable_by_their_owner_only(tmp_path) -> None:
    """A state encodes its prompt (schema and sample values of a database): files are written 0600."""
    import stat

    from tagql.llm.local import _DiskStates

    disk = _DiskStates(tmp_path / "kv")
    prefix = list(range(100))
    disk.save(prefix, b"state bytes")
    (f,) = (tmp_path / "kv").glob("*.kv")
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert disk.load(prefix) == b"state bytes"
    assert disk.load(prefix[:10]) is None  # too short to be worth a file
    disk.forget(prefix)
    assert disk.load(prefix) is None


def test_forgetting_the_last_prompt_keeps_the_prefixes_and_the_output() -> None:
    """``forget_last_prompt`` (the latency bench's reset between two runs of one question): the next call
    evaluates the question again after its stored prefix, finds the prefix, and writes the same text."""
    llm = _llm()
    messages = _messages("heroes", "How many superheroes are there?")
    first = llm.complete(messages, max_tokens=40)
    evaluated = llm._llama.n_tokens
    assert evaluated > 0
    stored = (list(llm._prefixes._slots), list(llm._prefixes._cold))
    llm.forget_last_prompt()
    assert llm._llama.n_tokens == 0
    assert (list(llm._prefixes._slots), list(llm._prefixes._cold)) == stored  # the prefixes are kept
    hits = llm._prefixes.hits
    again = llm.complete(messages, max_tokens=40)
    assert again.text == first.text
    assert llm._prefixes.hits == hits + 1  # the schema prefix was reused, not evaluated anew
