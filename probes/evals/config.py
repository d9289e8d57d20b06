"""The typed configs of everything that evaluates checkpoints, free of heavy imports.

`train.config.TrainConfig` composes `ProbesConfig` (and `train.corpus.DataConfig` composes
`GrammarConfig`), so building the run's schema must not pull in scoring, treebank readers or
benchmark formats: those load when a benchmark is resolved or a hook is built, not when the schema is.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

from probes.syntaxqa.records import KNOWLEDGE_POINTS, QUESTION_TYPES


@dataclass
class GrammarConfig:
    """The built-in grammar (probes/benchmarks/grammars/): one seed gives a training corpus and minimal pairs."""
    variant: str = "en"  # en | zh
    seed: int = 0
    n_documents: int = 2000
    sentences_per_document: int = 10
    pairs_per_paradigm: int = 200


ELAGENT_TASKS = ("precedence", "babi", "predicates")  # probes/elagent: the multiple-choice tasks
LANGUAGE_A_LEXICONS = ("tgt", "english")  # probes/elagent/language_a.py


@dataclass
class LanguageAConfig:
    shots: int = 1  # demonstrations before the test sentence
    pairs_per_paradigm: int = 50
    seed: int = 0
    lexicon: str = "tgt"  # tgt: the paper's tgt_<lemma> words; english: the bare lemma

    def __post_init__(self) -> None:
        if self.shots < 0:
            raise ValueError(f"language_a.shots must be >= 0, got {self.shots}")
        if self.pairs_per_paradigm < 1:
            raise ValueError(f"language_a.pairs_per_paradigm must be >= 1, got {self.pairs_per_paradigm}")
        if self.lexicon not in LANGUAGE_A_LEXICONS:
            raise ValueError(f"language_a.lexicon must be one of {LANGUAGE_A_LEXICONS}, got {self.lexicon!r}")


@dataclass
class ElagentConfig:
    enabled: bool = False
    tasks: list[str] = field(default_factory=lambda: list(ELAGENT_TASKS))
    items_per_paradigm: int = 20
    shots: int = 1  # solved examples of the same paradigm before each question
    seed: int = 0
    # precedence (Task 1): operators per expression, digits per operand, operator set, options per item
    n_operators: int = 3
    digits: int = 1
    operators: str = "+-*"
    precedence_options: int = 2  # the value under the new and the usual rule (+ other precedences' values)
    batch_size: int = 32

    def __post_init__(self) -> None:
        unknown = sorted(set(self.tasks) - set(ELAGENT_TASKS))
        if unknown or not self.tasks:
            raise ValueError(f"probes.elagent.tasks: unknown or empty {unknown or self.tasks}; known: {list(ELAGENT_TASKS)}")
        for key in ("items_per_paradigm", "batch_size", "digits"):
            if getattr(self, key) < 1:
                raise ValueError(f"probes.elagent.{key} must be >= 1, got {getattr(self, key)}")
        if self.shots < 0:
            raise ValueError(f"probes.elagent.shots must be >= 0, got {self.shots}")
        if not set(self.operators) <= set("+-*/") or len(set(self.operators)) != len(self.operators):
            raise ValueError(f"probes.elagent.operators: distinct characters of '+-*/', got {self.operators!r}")
        if not 2 <= self.n_operators <= len(self.operators):
            raise ValueError(f"probes.elagent.n_operators must be 2..{len(self.operators)} (distinct operators of "
                             f"probes.elagent.operators={self.operators!r}), got {self.n_operators}")
        if not 2 <= self.precedence_options <= 4:
            raise ValueError(f"probes.elagent.precedence_options must be 2..4, got {self.precedence_options}")


@dataclass
class BenchmarkConfig:
    name: str = "grammar"  # a registry name, or any label when path is given
    path: Optional[str] = None  # file or directory; None = the registry's default location
    format: str = "auto"  # auto | blimp | zhoblimp | climp | sling | babylm | jsonl | csv | grammar
    max_pairs_per_paradigm: Optional[int] = None  # subsample per paradigm, fixed seed (cheap in-loop probing)
    subsample_seed: int = 0
    good_field: Optional[str] = None  # generic jsonl/csv loader column mapping
    bad_field: Optional[str] = None
    paradigm_field: Optional[str] = None
    phenomenon_field: Optional[str] = None
    id_field: Optional[str] = None
    grammar: GrammarConfig = field(default_factory=GrammarConfig)  # for name=grammar / grammar_zh
    language_a: LanguageAConfig = field(default_factory=LanguageAConfig)  # for format elagent
    # ZhoBLiMP files: recover each pair's template slots (phrase regions such as the case study's
    # NP/VP) from the generation sources (projects/ZhoBLiMP/*.json, assets/); None = look beside
    # the data (an ancestor of the data directory holding both); "" = don't
    templates: Optional[str] = None


@dataclass
class PaperConfig:
    """``probes.syntax_qa.paper``: the paper's few-shot and generation settings (used when mode=paper)."""

    shots: int = 5  # exemplars per prompt (D.1); 0 = the paper's zero-shot prompt
    shot_seeds: int = 3  # exemplar draws per question, scores averaged (D.1)
    exemplar_k: int = 2  # exemplar-set questions per (type, knowledge point, answer category) tuple (§3.2)
    max_new_tokens_choice: int = 10  # true/false and multiple choice (D.1: "maximum length ... 10")
    max_new_tokens_fitb: int = 256  # fill in the blank (D.1: "maximum length to 256")

    def __post_init__(self) -> None:
        for key in ("shot_seeds", "exemplar_k", "max_new_tokens_choice", "max_new_tokens_fitb"):
            if getattr(self, key) < 1:
                raise ValueError(f"syntax_qa.paper.{key} must be >= 1, got {getattr(self, key)}")
        if self.shots < 0:
            raise ValueError(f"syntax_qa.paper.shots must be >= 0, got {self.shots}")


SYNTAX_QA_MODES = ("likelihood", "paper")


@dataclass
class SyntaxQAConfig:
    enabled: bool = False  # in-loop: probe every checkpoint (probes.syntax_qa.enabled=true)
    # likelihood: our wording, TF/MC ranked by likelihood (any base model, no generation needed);
    # paper: the paper's templates, prompts and few-shot setting, every answer generated and parsed
    # (probes.syntaxqa.paper_score; its settings under `paper`)
    mode: str = "likelihood"
    sources: list[str] = field(default_factory=list)  # .mrg / .conllu files or directories of them
    knowledge_points: list[str] = field(default_factory=lambda: list(KNOWLEDGE_POINTS))
    question_types: list[str] = field(default_factory=lambda: list(QUESTION_TYPES))
    k_per_tuple: int = 5  # items per (question type, knowledge point, answer category)
    seed: int = 0  # sampling, distractors, option order, exemplars
    shots: int = 0  # few-shot exemplars per prompt (same knowledge point and type)
    shot_seeds: int = 3  # few-shot only: exemplar sets per item, scores averaged
    max_items: Optional[int] = None  # cost cap after balanced sampling (keeps the balance)
    max_sentences: Optional[int] = None  # read at most this many sentences per source
    generate: bool = True  # False skips fill-in-the-blank generation (cheap in-loop runs; OA is then NaN)
    max_new_tokens: int = 32
    batch_size: int = 16
    paper: PaperConfig = field(default_factory=PaperConfig)  # mode=paper only

    def __post_init__(self) -> None:
        if self.mode not in SYNTAX_QA_MODES:
            raise ValueError(f"syntax_qa.mode: unknown {self.mode!r}; choose from {list(SYNTAX_QA_MODES)}")
        if self.mode == "paper" and self.shots:
            raise ValueError("syntax_qa.shots is the likelihood mode's; with mode=paper set syntax_qa.paper.shots")
        if self.mode == "paper" and not self.generate:
            raise ValueError("syntax_qa.generate=false cannot apply to mode=paper, which generates every answer")
        if self.enabled and not self.sources:
            raise ValueError("syntax_qa.sources is empty: name .mrg/.conllu files or directories to ask about")
        bad_kp = [k for k in self.knowledge_points if k not in KNOWLEDGE_POINTS]
        if bad_kp:
            raise ValueError(f"syntax_qa.knowledge_points: unknown {bad_kp}; choose from {list(KNOWLEDGE_POINTS)}")
        bad_t = [t for t in self.question_types if t not in QUESTION_TYPES]
        if bad_t:
            raise ValueError(f"syntax_qa.question_types: unknown {bad_t}; choose from {list(QUESTION_TYPES)}")
        for key in ("k_per_tuple", "batch_size", "max_new_tokens", "shot_seeds"):
            if getattr(self, key) < 1:
                raise ValueError(f"syntax_qa.{key} must be >= 1, got {getattr(self, key)}")
        if self.shots < 0:
            raise ValueError(f"syntax_qa.shots must be >= 0, got {self.shots}")
        if self.max_items is not None and self.max_items < 1:
            raise ValueError(f"syntax_qa.max_items must be >= 1 or null, got {self.max_items}")


_ENTRY_KEYS = {f.name for f in fields(BenchmarkConfig)}


@dataclass
class ProbesConfig:
    """What the probe hook scores at every checkpoint.

    ``benchmarks`` lists bare registry names and/or mappings of ``BenchmarkConfig`` fields, e.g.::

        probes.benchmarks=[zhoblimp,blimp]
        probes.benchmarks=[zhoblimp,{name: mine, path: /data/mine.jsonl, max_pairs_per_paradigm: null}]

    A bare name takes the top-level ``max_pairs_per_paradigm`` (in-loop probing scores a fixed-seed
    sample of each paradigm; null = every pair) and ``subsample_seed``, and reads the registry's
    location under ../shared/benchmarks or $SYNTAX_DYNAMICS_BENCHMARKS; a mapping takes the same
    defaults for the keys it does not set, so ``{name: blimp, path: /data/blimp}`` moves one.
    ``resolved_benchmarks()`` gives the list of ``BenchmarkConfig`` that is loaded; it is checked when
    the config is built.
    """
    enabled: bool = True
    # each entry: a registry name (str) or a mapping of BenchmarkConfig fields (see above);
    # Any because OmegaConf lists hold one element type and users type bare names
    benchmarks: list[Any] = field(default_factory=list)
    max_pairs_per_paradigm: Optional[int] = 50  # for entries that do not set it; null = all pairs
    subsample_seed: int = 0
    batch_size: int = 64
    bf16: bool = False  # bfloat16 autocast: faster on GPUs, lps move by ~1e-2 nats
    # true: the run's LAST checkpoint is also scored on every pair of every benchmark, written as
    # evals/step<last>/<name>_all.parquet (max_pairs_per_paradigm ignored): the curve keeps one fixed
    # sample at every checkpoint, and the report's scaling grid / difficulty groups get the full benchmark
    # as benchmark "<name>_all" (one checkpoint per run). The sample is a subset of the full set.
    final_all_pairs: bool = False
    # true: every eval file also gets ulp_good / ulp_bad, the sentences' unigram log-probs from the run's
    # token store, so SLOR and MORCELA can be computed without the model (probes/scoring/unigram.py)
    unigram: bool = True
    # true: every eval file also gets a sidecar <name>.tokens.parquet with each token's lp (probes/scoring/tokens.py)
    per_token: bool = False
    # The syntax-questions probe (probes.syntaxqa): probes.syntax_qa.enabled=true with sources
    syntax_qa: SyntaxQAConfig = field(default_factory=SyntaxQAConfig)
    # The ELAGENT multiple-choice probe (probes.elagent): probes.elagent.enabled=true
    elagent: ElagentConfig = field(default_factory=ElagentConfig)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"probes.batch_size must be >= 1, got {self.batch_size}")
        if self.max_pairs_per_paradigm is not None and self.max_pairs_per_paradigm < 1:
            raise ValueError(f"probes.max_pairs_per_paradigm must be >= 1 or null, "
                             f"got {self.max_pairs_per_paradigm}")
        self.resolved_benchmarks()  # a bad entry fails when the config is built

    def resolved_benchmarks(self) -> list[BenchmarkConfig]:
        """One BenchmarkConfig per entry of ``benchmarks``, defaults filled in (class doc)."""
        if not self.benchmarks:
            return []
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        # the registry check needs the benchmark registry, loaded only when there is something to check
        from probes.benchmarks.registry import benchmark_configs

        out = []
        for i, entry in enumerate(self.benchmarks):
            where = f"probes.benchmarks[{i}]"
            if isinstance(entry, BenchmarkConfig):
                out.append(entry)
                continue
            if isinstance(entry, str):
                entry = {"name": entry}
            if OmegaConf.is_config(entry):
                entry = OmegaConf.to_container(entry)
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ValueError(f"{where}: expected a benchmark name or a mapping with a 'name', "
                                 f"got {entry!r}")
            unknown = sorted(set(entry) - _ENTRY_KEYS)
            if unknown:
                raise ValueError(f"{where}: unknown key(s) {unknown}; known: {sorted(_ENTRY_KEYS)}")
            name, path = entry["name"], entry.get("path")
            try:
                # the registry check: a name that is neither known nor given a path fails here
                (base,) = benchmark_configs([name], self.max_pairs_per_paradigm, self.subsample_seed,
                                            {name: path} if path is not None else None)
                merged = OmegaConf.merge(OmegaConf.structured(base), entry)
                out.append(OmegaConf.to_object(merged))
            except OmegaConfBaseException as e:
                raise ValueError(f"{where}.{getattr(e, 'full_key', '')}: "
                                 f"{getattr(e, 'msg', str(e))}") from None
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
        return out
