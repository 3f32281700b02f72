"""Shim for Dataflow: `--setup_file ./setup.py` ships c4forge to the workers.

All metadata lives in pyproject.toml; setuptools reads it from there.
"""

from setuptools import setup

setup()
