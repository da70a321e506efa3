# Profiles: paper size on the simulated Hardware (analytic, meta device), and the
# small presets measured on this machine; each in its experiment's precision
# (config `precision`: a large NLP model in `large_nlp`'s, the others in `paper`'s; a label
# `<hw>+<precision>` profiles in that precision: the speedup table's variant).


rule profile_analytic:
    output:
        json="results/profiles/analytic/{hw}/{model}.json",
        csv="results/profiles/analytic/{hw}/{model}.csv",
    log:
        "logs/profile_analytic/{hw}/{model}.log",
    benchmark:
        "logs/benchmarks/profile_analytic/{hw}/{model}.tsv",
    params:
        source="analytic",
        size="paper",
        spec=model_spec,
        options=model_options,
        batch=paper_batch,
        hardware=config["hardware"],
        reps=1,
        threads=1,
        precision=lambda wc: profile_precision(wc.model, wc.hw),
        policy=lambda wc: profile_policy(wc.model, wc.hw),
    conda:
        "../../environment.yml"
    script:
        "../scripts/profile_model.py"


rule profile_measured:
    output:
        json="results/profiles/measured/{size}/{model}.json",
        csv="results/profiles/measured/{size}/{model}.csv",
    log:
        "logs/profile_measured/{size}/{model}.log",
    benchmark:
        "logs/benchmarks/profile_measured/{size}/{model}.tsv",
    params:
        source="measured",
        size=lambda wc: wc.size,
        batch=0,
        hardware=config["measured"]["device"],
        reps=config["measured"]["reps"],
        threads=config["measured"]["threads"],
        precision=config.get("precision", {}).get("measured", "fp32"),
    threads: config["measured"]["threads"]
    # measured jobs first: one at a time, they are the run's longest chain, and the other jobs fill the
    # other core meanwhile (snakemake runs the higher priority first)
    priority: 10
    resources:
        # One measured job at a time so that timings are not disturbed by another job.
        measuring=1,
    conda:
        "../../environment.yml"
    script:
        "../scripts/profile_model.py"
