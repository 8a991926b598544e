"""The command line's last line of defence: an unexpected error is one line naming the command (the traceback with
--debug), Ctrl-C says the same command resumes."""
from __future__ import annotations

import pytest

import runners.cli.main as cli

#: every case runs under a time and an address-space limit (conftest.py: bounded)
pytestmark = pytest.mark.usefixtures("bounded")


@pytest.mark.parametrize("exc", [RuntimeError("boom\nsecond line"), KeyError("boom"), OSError(28, "No space left")])
def test_an_unexpected_error_is_one_line_naming_the_command(monkeypatch, capsys, exc):
    def broken(args):
        raise exc

    monkeypatch.setattr(cli, "cmd_list", broken)
    assert cli.main(["list", "--results", "local"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "list --results local" in err and type(exc).__name__ in err and "--debug" in err


def test_debug_shows_the_traceback(monkeypatch):
    def broken(args):
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "cmd_list", broken)
    with pytest.raises(RuntimeError, match="boom"):
        cli.main(["list", "--debug"])
    with pytest.raises(RuntimeError, match="boom"):
        cli.main(["--debug", "list"])


def test_ctrl_c_says_the_same_command_resumes(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_list", interrupted)
    assert cli.main(["list"]) == cli.EXIT_INTERRUPTED
    assert capsys.readouterr().err.strip() == ("interrupted; the same command resumes (each training cell from its "
                                              "last checkpoint)")


def test_a_runaway_allocation_fails_the_case_instead_of_exhausting_the_machine():
    """The corpus's address-space limit holds: an allocation beyond it is a MemoryError in the case."""
    import resource

    import numpy as np

    limit, _ = resource.getrlimit(resource.RLIMIT_AS)  # the soft limit the corpus's fixture set for this case
    assert limit != resource.RLIM_INFINITY
    with pytest.raises(MemoryError):
        np.ones(limit, dtype=np.uint8)
