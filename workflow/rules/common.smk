# Validate the config once, before any job runs: a bad key or value stops the
# run with one message naming it and the allowed values.
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from karma.errors import KarmaError
from karma.hardware import load as load_hardware

validate(config, "../schemas/config.schema.yaml")
try:
    HARDWARE = load_hardware(config["hardware"]).name
except KarmaError as err:
    raise WorkflowError(f"config 'hardware': {err}") from None


def paper_batch(wildcards):
    return config["batch"].get(wildcards.model, 0)


def analytic_profiles(wildcards):
    return expand("results/profiles/analytic/{hw}/{model}.json", hw=HARDWARE, model=config["paper_models"])


def measured_profiles(wildcards):
    size = config["measured"]["size"]
    return expand("results/profiles/measured/{size}/{model}.json", size=size, model=config["measured"]["models"])
