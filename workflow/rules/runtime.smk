# The runtime on this machine: plan on a measured profile, simulate, run, compare. The profile is kept
# (.profile.json) so that a plan that ran out of memory or missed its prediction can be replayed.


rule validate_runtime:
    output:
        csv="results/runtime/{model}.csv",
        profile="results/runtime/{model}.profile.json",
    log:
        "logs/validate_runtime/{model}.log",
    benchmark:
        "logs/benchmarks/validate_runtime/{model}.tsv",
    params:
        batch=lambda wc: config["runtime"]["batch"].get(wc.model, 0),
        build=runtime_build,
        fraction=config["runtime"]["capacity_fraction"],
        steps=config["runtime"]["steps"],
        repeats=config["runtime"].get("repeats", 3),
        strategies=config["runtime"]["strategies"],
        link_mbs=config["runtime"].get("link_mbs"),
        device=config["runtime"].get("device", "cpu"),
    # compute on one core; the emulated link's copies share the other with a simulated job, which runs at the
    # lowest CPU priority (workflow/scripts/_log.py; docs/machine.md). Measured jobs first and one at a time:
    # they are the run's longest chain (snakemake runs the higher priority first)
    threads: 1
    priority: 10
    resources:
        measuring=1,
    conda:
        "../../environment.yml"
    script:
        "../scripts/validate_runtime.py"


rule validate_reach:
    output:
        csv="results/runtime_reach/{model}.csv",
        profile="results/runtime_reach/{model}.profile.json",
    log:
        "logs/validate_reach/{model}.log",
    benchmark:
        "logs/benchmarks/validate_reach/{model}.tsv",
    params:
        batch=lambda wc: config["runtime"]["reach"]["batch"],
        below=config["runtime"]["reach"]["below_block_floor"],
        steps=config["runtime"]["steps"],
        repeats=config["runtime"].get("repeats", 3),
        strategies=config["runtime"]["reach"]["strategies"],
        link_mbs=config["runtime"].get("link_mbs") or 100,
    # compute on one core; the emulated link's copies share the other with a simulated job, which runs at the
    # lowest CPU priority (workflow/scripts/_log.py; docs/machine.md). Measured jobs first and one at a time:
    # they are the run's longest chain (snakemake runs the higher priority first)
    threads: 1
    priority: 10
    resources:
        measuring=1,
    conda:
        "../../environment.yml"
    script:
        "../scripts/validate_reach.py"


rule runtime_table:
    input:
        runtime_tables,
    output:
        csv=report("results/tables/measured_vs_predicted.csv", caption="../report/measured_vs_predicted_table.rst",
                   category="2. Runtime on this machine (measured)"),
        md="results/tables/measured_vs_predicted.md",
        figure=report("results/figures/measured_vs_predicted.png", caption="../report/measured_vs_predicted.rst",
                      category="2. Runtime on this machine (measured)"),
        terms_csv="results/tables/measured_vs_predicted_terms.csv",
        terms_md="results/tables/measured_vs_predicted_terms.md",
    log:
        "logs/runtime_table.log",
    benchmark:
        "logs/benchmarks/runtime_table.tsv",
    conda:
        "../../environment.yml"
    script:
        "../scripts/runtime_table.py"
