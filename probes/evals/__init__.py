"""The eval contract: what everything that writes or reads evaluations agrees on, at the bottom of probes/.

* ``config`` -- BenchmarkConfig (and the LanguageAConfig it composes): plain typed data
* ``files``  -- eval_path, eval-file metadata (eval_meta, eval_file_meta), the pair set and eval_done
                ("already done": same convention, same pair set, same checkpoint manifest)

It imports nothing of probes/ and only the ground of train/ (train.files: the atomic writer, trainer
state, manifests; train.corpus.GrammarConfig). Who scores a checkpoint is probes.scoring.evaluate; how the
trainer reaches the probes is probes.scoring.hook.ProbesConfig (named by the config, never imported by train/).
"""
