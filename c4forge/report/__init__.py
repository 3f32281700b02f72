"""`c4forge report`: the datasheet of a clean corpus (issue 17)."""
