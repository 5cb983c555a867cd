"""``mode=polling``: one table read by its tracking column, without logical decoding.

The streaming reader (:mod:`.reader`), the table and every statement run on it
(:mod:`.table`), and the offsets (:mod:`.offset`).
"""
