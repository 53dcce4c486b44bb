"""leir.files.write_atomic: all of the new text or none of it."""

from __future__ import annotations

import os

import pytest

from leir.files import write_atomic


def test_a_new_file_gets_the_umask_permissions_not_mkstemps(tmp_path):
    path = tmp_path / "new.leir"
    old = os.umask(0o022)
    try:
        write_atomic(path, "L^{4}_{i} [ Y_{i} = X_{i}; ];\n")
    finally:
        os.umask(old)
    assert path.read_text() == "L^{4}_{i} [ Y_{i} = X_{i}; ];\n"
    assert path.stat().st_mode & 0o777 == 0o644


def test_an_existing_file_keeps_its_permissions_and_newlines_are_kept(tmp_path):
    path = tmp_path / "old.leir"
    path.write_text("old")
    path.chmod(0o600)
    write_atomic(path, "a\r\nb\n", durable=True)
    assert path.read_bytes() == b"a\r\nb\n"
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "kept.leir"
    path.write_text("kept")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(path, "half \ud800 written")  # a lone surrogate cannot be encoded
    assert path.read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.leir"]
