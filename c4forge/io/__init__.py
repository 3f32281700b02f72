"""Reading and writing artefacts: one storage layer for every path kind (``storage``)."""
