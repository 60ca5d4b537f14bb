"""The package's public surface is deliberate: every exported name exists and the list is complete and sorted."""

from __future__ import annotations

import inspect

import remem


def test_all_is_sorted_and_every_name_exists() -> None:
    assert remem.__all__ == sorted(remem.__all__, key=lambda name: (name[0].islower(), name))
    for name in remem.__all__:
        assert hasattr(remem, name), name


def test_every_public_name_imported_into_the_package_is_exported() -> None:
    public = {
        name
        for name, value in vars(remem).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and getattr(value, "__module__", "").startswith("remem")
    }
    assert public <= set(remem.__all__), public - set(remem.__all__)


def test_errors_have_one_root_and_usage_errors_are_value_errors() -> None:
    for name in remem.__all__:
        value = getattr(remem, name)
        if inspect.isclass(value) and issubclass(value, BaseException):
            assert issubclass(value, remem.RememError)
    assert issubclass(remem.ConfigError, ValueError)
    assert not issubclass(remem.StorageError, ValueError)
