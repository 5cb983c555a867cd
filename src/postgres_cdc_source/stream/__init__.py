"""``mode=cdc``: the change stream of a logical replication slot.

The streaming reader that plans LSN ranges and peeks them (:mod:`.reader`, :mod:`.splitting`),
and unchanged TOAST values completed after a snapshot that was not exact (:mod:`.reselect`).
The slot and its publications are :mod:`postgres_cdc_source.replication`'s.
"""
