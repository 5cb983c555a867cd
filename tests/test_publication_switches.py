"""Whether a batch reads ``<publication>_all``: the switches recorded in its comment, per slot
and position (pure logic; :mod:`test_new_tables` drives it against Postgres)."""

from __future__ import annotations

from postgres_cdc_source.replication.publication import MARKER, AllState, reads_all, switches


def state(comment: str, *, fit: bool = True, skips_older: bool = False) -> AllState:
    return AllState(fit, skips_older, False, MARKER + comment, 0x100, 0x200)


def test_the_last_switch_at_or_before_a_batchs_start_decides() -> None:
    comment = "; slot a from LSN 0/10; slot b from LSN 0/18; slot a until LSN 0/30"
    assert switches(MARKER + comment, "a") == [(True, 0x10), (False, 0x30)]
    read = state(comment)
    assert [reads_all(read, "a", at) for at in (0xF, 0x10, 0x2F, 0x30, 0x99)] == [
        False, True, True, False, False]
    assert [reads_all(read, "b", at) for at in (0x17, 0x18, 0x99)] == [False, True, True]
    assert not reads_all(read, "ab", 0x99)  # another slot's name is not a prefix match


def test_postgres_18_reads_it_until_a_switch_says_otherwise() -> None:
    """From 18 a slot without switches reads it from the start (pgoutput skips a publication
    newer than a change); a slot stopped by the default reads it no more."""
    assert reads_all(state("", skips_older=True), "a", 0)
    stopped = state("; slot a until LSN 0/40", skips_older=True)
    assert reads_all(stopped, "a", 0x3F) and not reads_all(stopped, "a", 0x40)


def test_a_publication_that_is_not_all_tables_inserts_only_is_never_read() -> None:
    assert not reads_all(state("; slot a from LSN 0/10", fit=False), "a", 0x99)
    assert not reads_all(None, "a", 0x99)
