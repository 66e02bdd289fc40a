"""The profiler's C++ start/stop log kept off fd 2 (lessons 10 and 13), and fd 2 back after."""
import os

import torch
from torch.profiler import ProfilerActivity, profile

from ddl_lab.ml.profiling import quiet_stderr


def test_the_profilers_log_is_kept_off_fd_2_and_fd_2_comes_back(capfd):
    with quiet_stderr():
        with profile(activities=[ProfilerActivity.CPU]):
            torch.ones(4).sum()
        os.write(2, b"hidden while quiet\n")
    os.write(2, b"shown after\n")
    err = capfd.readouterr().err
    assert "hidden while quiet" not in err and "USDT" not in err
    assert "shown after" in err


def test_fd_2_comes_back_when_the_block_raises(capfd):
    try:
        with quiet_stderr():
            raise ValueError("planted")
    except ValueError:
        pass
    os.write(2, b"fd 2 restored\n")
    assert "fd 2 restored" in capfd.readouterr().err
