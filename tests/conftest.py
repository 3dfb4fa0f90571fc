"""Shared test set-up: the pytester plugin for plugin-level tests."""

pytest_plugins = ["pytester"]
