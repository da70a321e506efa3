# Multi-node data parallel out-of-core training, simulated at paper scale.


rule scaling:
    input:
        profile="results/profiles/analytic/{hw}/{model}.json",
        plans="results/plans/{hw}/{model}",
    output:
        "results/scaling/{hw}/{model}.csv",
    log:
        "logs/scaling/{hw}/{model}.log",
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
        csv="results/tables/scaling.csv",
        md="results/tables/scaling.md",
        figure="results/figures/scaling.png",
    log:
        "logs/scaling_table.log",
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
    params:
        ranks=config["distributed"]["ranks"],
        batch=config["distributed"]["batch"],
        steps=config["distributed"]["steps"],
    threads: config["distributed"]["ranks"]
    resources:
        measuring=1,
    conda:
        "../../environment.yml"
    shell:
        "timeout 600 mpiexec -n {params.ranks} python -m karma.validate_dp {wildcards.model} --batch {params.batch} "
        "--steps {params.steps} --out {output} > {log} 2>&1"


rule distributed_table:
    input:
        expand("results/distributed/{model}.csv", model=config["distributed"]["models"]),
    output:
        csv="results/tables/distributed_validation.csv",
        md="results/tables/distributed_validation.md",
    log:
        "logs/distributed_table.log",
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
        reference="results/reference/metrics.csv",
    output:
        "results/tables/regression.md",
    log:
        "logs/regression.log",
    conda:
        "../../environment.yml"
    shell:
        "karma compare --reference {input.reference} --out {output} > {log} 2>&1 || "
        "(cat {log}; rm -f {output}; exit 1)"
