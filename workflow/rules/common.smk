# Validate the config once, before any job runs: a bad key or value stops the
# run with one message naming it and the allowed values.
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from karma.core.errors import KarmaError, finite_everywhere
from karma.core.hardware import load as load_hardware
from karma.strategies import available as available_strategies
from models.registry import model_names

validate(config, "../schemas/config.schema.yaml")
try:
    finite_everywhere(config, "config")
except KarmaError as err:
    raise WorkflowError(str(err)) from None
try:
    HARDWARE = load_hardware(config["hardware"]).name
except KarmaError as err:
    raise WorkflowError(f"config 'hardware': {err}") from None
_unknown = [s for s in config["strategies"] + config["runtime"]["strategies"] if s not in available_strategies()]
if _unknown:
    raise WorkflowError(f"config 'strategies': unknown strategy '{_unknown[0]}'; "
                        f"valid: {', '.join(available_strategies())}")
for _key, _models in (("speedup_models", config["speedup_models"]), ("gantt_model", [config["gantt_model"]]),
                      ("large_nlp: models", config["large_nlp"]["models"])):
    for _model in _models:
        if _model not in config["paper_models"]:
            raise WorkflowError(f"config '{_key}': '{_model}' must also be listed in 'paper_models'")
for _hw in config["large_nlp"]["whatif_hardware"]:
    try:
        load_hardware(_hw)
    except KarmaError as err:
        raise WorkflowError(f"config 'large_nlp: whatif_hardware': {err}") from None


#: Your own models (config `extra_models`, docs/models.md "Your own model"): name -> its entry.
EXTRA = {m["name"]: m for m in config.get("extra_models", [])}
_clash = [name for name in EXTRA if name in config["paper_models"] or ":" in name]
if _clash:
    raise WorkflowError(f"config 'extra_models': name '{_clash[0]}' is a zoo model's; give it another name")


#: The runtime's models (config `runtime`): a zoo model at the small size with `runtime.options` as its overrides,
#: or an entry of `runtime.own_models` (a spec, as extra_models have, and its options).
RUNTIME_OWN = {m["name"]: m for m in config["runtime"].get("own_models", [])}
for _model in config["runtime"]["models"]:
    if _model not in RUNTIME_OWN and _model not in model_names():
        raise WorkflowError(f"config 'runtime: models': '{_model}' is neither a zoo model nor a name in "
                            f"'runtime: own_models'")


def runtime_build(wildcards):
    """{model: what models.build builds, overrides: its options} of a runtime model wildcard."""
    own = RUNTIME_OWN.get(wildcards.model)
    if own is not None:
        return {"model": own["spec"], "overrides": own.get("options", {})}
    return {"model": wildcards.model, "overrides": config["runtime"].get("options", {}).get(wildcards.model)}


def paper_batch(wildcards):
    if wildcards.model in EXTRA:
        return EXTRA[wildcards.model].get("batch", 0)
    return config["batch"].get(wildcards.model, 0)


def model_spec(wildcards):
    """What make_profile builds for a model wildcard: a zoo name, or an extra model's spec."""
    return EXTRA[wildcards.model]["spec"] if wildcards.model in EXTRA else wildcards.model


def model_options(wildcards):
    return EXTRA.get(wildcards.model, {}).get("options", {})


def analytic_profiles(wildcards):
    return expand("results/profiles/analytic/{hw}/{model}.json", hw=HARDWARE,
                  model=config["paper_models"] + list(EXTRA))


def measured_profiles(wildcards):
    """Every profile the run measures: `measured.models`' (their own rule) and the runtime validation's (each model
    measured once, at its runtime batch, and used by both tables)."""
    size = config["measured"]["size"]
    return expand("results/profiles/measured/{size}/{model}.json", size=size,
                  model=config["measured"]["models"]) + expand("results/runtime/{model}.profile.json",
                                                               model=config["runtime"]["models"])


def strategy_tables(wildcards):
    return expand("results/strategies/{hw}/{model}.csv", hw=HARDWARE, model=config["speedup_models"] + list(EXTRA))


def runtime_tables(wildcards):
    reach = config["runtime"].get("reach", {}).get("models", [])
    return expand("results/runtime/{model}.csv", model=config["runtime"]["models"]) + expand(
        "results/runtime_reach/{model}.csv", model=reach
    )


def scaling_tables(wildcards):
    return expand("results/scaling/{hw}/{model}.csv", hw=HARDWARE, model=config["speedup_models"])


def nlp_maps(wildcards):
    return expand("results/nlp_map/{precision}/{model}.csv", precision=config["large_nlp"]["map"]["precisions"],
                  model=config["large_nlp"]["models"])


def large_nlp_tables(wildcards):
    return expand("results/large_nlp/{hw}/{model}.csv", hw=HARDWARE, model=config["large_nlp"]["models"])


def tp_validations(wildcards):
    return expand("results/tp_validation/{model}.csv", model=config["large_nlp"]["validate"]["models"])


def profile_precision(model, label=None):
    """The precision a paper-size model is profiled in: its experiment's (config `precision`), or the
    one a results label names (`v100-abci+bf16`: the speedup table's precision variant)."""
    if label and "+" in label:
        return label.split("+", 1)[1]
    if model in EXTRA:
        return EXTRA[model].get("precision", "fp32")
    wanted = config.get("precision", {})
    key = "large_nlp" if model in config["large_nlp"]["models"] else "paper"
    return wanted.get(key, "fp32")


def profile_policy(model, label=None):
    """Autocast op lists of a mixed-precision analytic profile: Megatron-LM's own half layer for the
    large NLP models (both sides of the comparison; karma/experiments/large_nlp.py), CUDA's for the rest."""
    if model in config["large_nlp"]["models"] and not (label and "+" in label):
        return "megatron"
    return None


def variant_strategy_tables(wildcards):
    """The six models' strategy tables in the speedup table's precision variant."""
    return expand("results/strategies/{hw}+{precision}/{model}.csv", hw=HARDWARE, precision=wildcards.precision,
                  model=config["speedup_models"])
