"""ttlctl.errors: a flag's refusal with its reason apart, and an OS error quoted one way."""

from __future__ import annotations

import copy
import errno
import os
import pickle

from ttlctl.errors import ConfigError, FlagError, os_reason


def test_a_flag_error_reads_flag_then_reason_and_survives_pickling() -> None:
    """Regression: a FlagError came back from pickle or copy as a TypeError (its one
    message argument was taken for both parts)."""
    err = FlagError("--as vllm-router", "the bundle's router 'x' is not a policy")
    assert str(err) == "--as vllm-router: the bundle's router 'x' is not a policy"
    assert isinstance(err, ConfigError) and err.flag == "--as vllm-router"
    for again in (pickle.loads(pickle.dumps(err)), copy.copy(err)):
        assert type(again) is FlagError and str(again) == str(err)
        assert (again.flag, again.why) == (err.flag, err.why)


def test_an_os_error_is_quoted_in_lower_case_else_as_raised() -> None:
    missing = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "/x/Y")
    assert os_reason(missing) == "no such file or directory"  # not the path, not "[Errno 2]"
    assert os_reason(OSError("Disk Quota /x/Y")) == "Disk Quota /x/Y"  # no errno: as given
    assert os_reason(OSError()) == "OSError"
