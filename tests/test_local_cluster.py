"""slurm/local-cluster.sh down stops only what `up` started and takes its /etc/hosts line out again (issue 44).

Run in a mount namespace of its own (`unshare -m`) with /run, the script's state directory and /etc/hosts
bound to temporary copies: the machine's real daemons and files are never touched, and a host's "own"
slurmctld and munged are stand-ins (a copy of sleep under that name, so /proc/PID/comm says it)."""
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TAG = "# slurm/local-cluster.sh"


def _daemon(tmp: Path, name: str) -> subprocess.Popen:
    exe = tmp / "bin" / name
    exe.parent.mkdir(exist_ok=True)
    shutil.copy(shutil.which("sleep"), exe)
    return subprocess.Popen([str(exe), "300"])


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare -m")
def test_down_stops_only_its_own_daemons_and_removes_its_hosts_line(tmp_path):
    run, state, hosts = tmp_path / "run", tmp_path / "state", tmp_path / "hosts"
    (run / "munge").mkdir(parents=True)
    state.mkdir()
    host_ctld, host_munged, own_slurmd = (_daemon(tmp_path, n) for n in ("slurmctld", "munged", "slurmd"))
    # the host's own daemons, where the old script looked; the one `up` started, in its state directory
    (run / "slurmctld.pid").write_text(f"{host_ctld.pid}\n")
    (run / "munge" / "munged.pid").write_text(f"{host_munged.pid}\n")
    (state / "slurmd-n1.pid").write_text(f"{own_slurmd.pid}\n")
    (state / "munged.pid").write_text(f"{host_ctld.pid}\n")  # a pid reused since by another program: kept
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 ctl n1 {TAG}\n10.0.0.1 db\n")
    mounts = f"mount --bind {run} /run && mount --bind {state} /var/lib/slurm-local && mount --bind {hosts} /etc/hosts"
    try:
        proc = subprocess.run(["unshare", "-m", "bash", "-c", f"{mounts} && bash slurm/local-cluster.sh down"],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "local-cluster: down" in proc.stderr, proc.stderr
        assert own_slurmd.wait(timeout=10) == -signal.SIGTERM
        assert host_ctld.poll() is None and host_munged.poll() is None  # a host's daemons run on
        assert hosts.read_text() == "127.0.0.1 localhost\n10.0.0.1 db\n"  # in place: /etc/hosts is a mount here
        assert sorted(p.name for p in state.iterdir()) == []
    finally:
        for p in (host_ctld, host_munged, own_slurmd):
            p.kill()
            p.wait()
