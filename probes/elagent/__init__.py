"""ELAGENT-style generated tasks as checkpoint probes (Li et al., "Challenging Large Language Models with
New Tasks: A Study on their Adaptability and Robustness", ../shared/papers/004_*.txt).

The paper builds new, simple tasks from rules so that no test item can have been seen in training. The ones a
base model can be asked by likelihood are generated here, seeded, from the paper's task rules (no data is read):

* ``precedence``   Task 1 (§2.1, App. C.1): arithmetic under redefined operator precedence; multiple choice
                   between the value under the new rule and the value under the usual one.
* ``deduction``    Task 5 (§2.3, App. C.5): bAbI basic deduction ("X is a cat. Cats are afraid of wolves.");
                   Task 6 (§2.3, Table 4, App. C.6): deduction with (non-)transitive / (non-)symmetric predicates.
                   Multiple choice over entities.
* ``language_a``   Tasks 3-4 (§2.2, Table 2, App. C.3-C.4; probes/benchmarks/language_a.py, a generated
                   benchmark): the artificial Language A (SOV, modifiers before verbs and nouns, S_/P_ nouns, tense suffixes, doubled adjectives) as minimal pairs: a
                   translation that follows Language A vs the same words in English order, after k
                   demonstrations. A registry benchmark (``elagent_word_order``) scored like every minimal pair.

``items`` holds the multiple-choice record and the two layouts (options listed with letters, answered by the
letter; and the cloze layout with a matched context); ``score`` scores every item twice -- by its letter (the
ELAGENT layout, chance 1 / options) and by its context pair (no letters; chance 0.5 exactly, by
counterbalance) -- summarises and writes ``<run>/evals/step<N>/elagent.parquet``; ``hook`` runs that at every
checkpoint; ``report`` draws both curves.
"""

from probes.elagent.config import KIND, ElagentConfig
from probes.families import Family

FAMILY = Family(kind=KIND, key="elagent", config=ElagentConfig, hook="probes.elagent.hook:build",
                table="probes.elagent.report:elagent_table", curves="probes.elagent.report:write_elagent_curves",
                section="probes.elagent.report:elagent_section", tasks="probes.elagent.report:task_rows")
