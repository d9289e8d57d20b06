"""Ctrl-C of a `python -m probes` / `python -m train` command (train/commands.py's dispatch): one line and exit
status 130, no traceback from it or its forked workers, none of them left (issue 44: 46 lines from `probes report`)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMAND = '''
import multiprocessing, time
from concurrent.futures import ProcessPoolExecutor

def nap(_):
    time.sleep(60)

def main(argv):
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:  # as probes report's
        list(pool.map(nap, range(2)))
'''


def test_ctrl_c_of_a_command_with_forked_workers_is_one_line_and_130(tmp_path):
    (tmp_path / "slowcmd.py").write_text(COMMAND)
    script = ("import sys; from train.commands import dispatch; "
              "sys.exit(dispatch('prog', {'slow': ('slowcmd:main', '')}, ['slow']))")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, start_new_session=True, text=True,
                            env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    from train.interrupt import children
    deadline = time.monotonic() + 60
    while len(children(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = children(proc.pid)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole process group
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode == 130 and err == "interrupted by SIGINT: prog slow stopped (exit status 130)\n", err
    assert len(workers) == 2 and not [p for p in workers if Path(f"/proc/{p}").exists()]
