"""The clean pipeline's base types, below every room that reads, filters or runs documents:
the records (``documents``), the URL key (``urls``), the counters and their ``Flow``
(``counting``), dropped-item samples (``drop_samples``), the kinds of stage (``stages``) and
the clean corpus on disk (``clean_docs``). The stage rooms, the engines and ``clean`` import
them; nothing here imports those rooms (``tests/test_rooms.py``)."""
