"""Progress of profile and advise: one line per trial where stdout is not a terminal."""

import subprocess
import sys

from scalelab.progress import TrialProgress, clock_text, expected_trials


def test_trial_lines_count_trials_and_estimate_the_time_left():
    now = [0.0]
    lines: list[str] = []
    p = TrialProgress(4, emit=lines.append, clock=lambda: now[0])
    p("describing the model")  # not a trial
    assert lines == []
    for text in ("timing batch 2", "timing batch 4", "trying bf16_autocast at batch 4"):
        p(text)
        now[0] += 10.0
    p("timing the host's cost per operation")
    p("timing batch 8")  # the search ran longer than expected: n follows
    assert lines[0] == "progress: trial 1 of 4, timing batch 2, 0:00 elapsed"
    # two trials done in 20 s: 10 s each, 2 more expected
    assert lines[2] == ("progress: trial 3 of 4, trying bf16_autocast at batch 4, 0:20 "
                        "elapsed, about 0:20 left")
    assert lines[4].startswith("progress: trial 5 of 5, timing batch 8, 0:30 elapsed")
    assert clock_text(3725) == "1:02:05"
    assert expected_trials([2, 4], 256, 4, False) == 6
    assert expected_trials("auto", 64, 1, True) == 11  # log2(64) + 3 searches, io, host


def test_profile_prints_a_line_per_trial_when_stdout_is_not_a_terminal(tmp_path):
    # run from a temporary folder: the shipped toy model imports from anywhere
    r = subprocess.run([sys.executable, "-m", "scalelab", "profile", "scalelab.toys:tiny",
                        "--input-shape", "12", "--num-classes", "4", "--batch-sizes", "2,4",
                        "--algorithms", "none", "--steps", "1", "--out", "p.json"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stdout.splitlines() if x.startswith("progress: ")]
    assert [x.split(",")[0] for x in lines] == ["progress: trial 1 of 3",
                                                "progress: trial 2 of 3",
                                                "progress: trial 3 of 3"]
    assert "timing batch 2" in lines[0] and "elapsed" in lines[0]
    assert "left" in lines[1] and (tmp_path / "p.json").is_file()
