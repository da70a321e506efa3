# Multi-node data parallel out-of-core training, simulated at paper scale.


rule scaling:
    input:
        profile="results/profiles/analytic/{hw}/{model}.json",
        plans="results/plans/{hw}/{model}",
    output:
        "results/scaling/{hw}/{model}.csv",
    log:
        "logs/scaling/{hw}/{model}.log",
    benchmark:
        "logs/benchmarks/scaling/{hw}/{model}.tsv",
    params:
        hardware=config["hardware"],
        nodes=config["scaling"]["nodes"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/scaling.py"


rule scaling_table:
    input:
        scaling_tables,
    output:
        csv=report("results/tables/scaling.csv", caption="../report/scaling_table.rst",
                   category="3. Multi-node data parallel"),
        md="results/tables/scaling.md",
        figure=report("results/figures/scaling.png", caption="../report/scaling.rst",
                      category="3. Multi-node data parallel"),
    log:
        "logs/scaling_table.log",
    benchmark:
        "logs/benchmarks/scaling_table.tsv",
    params:
        hardware=config["hardware"],
    conda:
        "../../environment.yml"
    script:
        "../scripts/scaling_table.py"


rule validate_distributed:
    output:
        "results/distributed/{model}.csv",
    log:
        "logs/validate_distributed/{model}.log",
    benchmark:
        "logs/benchmarks/validate_distributed/{model}.tsv",
    params:
        batch=config["distributed"]["batch"],
        steps=config["distributed"]["steps"],
        repeats=config["distributed"].get("repeats", 3),
        link_mbs=config["distributed"].get("link_mbs", 300),
    threads: config["distributed"]["ranks"]
    # measured jobs first: one at a time, they are the run's longest chain, and the other jobs fill the
    # other core meanwhile (snakemake runs the higher priority first)
    priority: 10
    resources:
        measuring=1,
        # MPI launcher: mpiexec here (mpich wheel); the Slurm profile sets mpi="srun" (docs/pipeline.md).
        mpi="mpiexec",
        tasks=config["distributed"]["ranks"],
    conda:
        "../../environment.yml"
    shell:
        "timeout 600 {resources.mpi} -n {resources.tasks} python -m karma.experiments.validate_data_parallel {wildcards.model} --batch {params.batch} "
        "--steps {params.steps} --repeats {params.repeats} --link-mbs {params.link_mbs} --out {output} > {log} 2>&1"


rule distributed_table:
    input:
        expand("results/distributed/{model}.csv", model=config["distributed"]["models"]),
    output:
        csv=report("results/tables/distributed_validation.csv", caption="../report/distributed_validation.rst",
                   category="3. Multi-node data parallel"),
        md="results/tables/distributed_validation.md",
    log:
        "logs/distributed_table.log",
    benchmark:
        "logs/benchmarks/distributed_table.tsv",
    conda:
        "../../environment.yml"
    script:
        "../scripts/distributed_table.py"


rule regression:
    input:
        "results/tables/speedups.csv",
        "results/tables/scaling.csv",
        "results/tables/measured_vs_predicted.csv",
        "results/tables/distributed_validation.csv",
        "results/tables/large_nlp_summary.csv",
        "results/tables/tp_validation.csv",
        "results/tables/reach.csv",
        "results/tables/reach_granularity.csv",
        reference="results/reference/metrics.csv",
    output:
        "results/tables/regression.md",
    log:
        "logs/regression.log",
    benchmark:
        "logs/benchmarks/regression.tsv",
    # Reports a verdict per number and exits 0 whatever they are (a busy machine must not fail a
    # reproduction run); only a missing table or a bad reference fails it. CI runs
    # `karma compare --strict` after the pipeline (.ci/run).
    conda:
        "../../environment.yml"
    shell:
        "karma compare --reference {input.reference} --out {output} > {log} 2>&1 || "
        "(cat {log}; rm -f {output}; exit 1)"
