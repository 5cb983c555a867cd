"""``mode=cdc``: the change stream of a logical replication slot.

The slot and its publications (:mod:`.slot`, :mod:`.publication`), the streaming reader that
plans LSN ranges and peeks them (:mod:`.reader`, :mod:`.splitting`), whole transactions turned
into Arrow batches (:mod:`.assembly`), and unchanged TOAST values completed after a snapshot
that was not exact (:mod:`.reselect`).
"""
