"""hydra/launcher=slurm (configs/hydra/launcher/slurm.yaml's _target_): submitit's SLURM launcher with each
run's GPUs, memory and time from the plan (train/slurm.py, launch_planned). Here because Hydra takes launchers
only from the hydra_plugins namespace."""
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher


class PlannedSlurmLauncher(SlurmLauncher):
    def launch(self, job_overrides, initial_job_idx):
        from train.slurm import launch_planned

        return launch_planned(self, job_overrides, initial_job_idx)
