"""Disaster recovery's library: the metadata store rebuilt from the bucket, segments restored to a broker.

:mod:`rlm.recovery.rebuild_scan` and :mod:`rlm.recovery.rebuild` (``rlm metadata rebuild``),
:mod:`rlm.recovery.restore` with :mod:`rlm.recovery.open_txns`, :mod:`rlm.recovery.adopt` and
:mod:`rlm.recovery.producer_ids` (``rlm restore`` and its ``--adopt-into`` /
``--reserve-producer-ids``). The commands in :mod:`rlm.commands` only parse arguments and print.
"""
