"""Launch-configuration facts (postmortem/config.py) and config checks (postmortem/config_rules.py).

Fixture jobs are written from real-format lines: seed 004's launch command as the user posted
it, ms-swift / HF / DeepSpeed / NCCL / torchrun lines in the formats of
``shared/reference/log-formats.md`` and the corpus. Corpus jobs are used when they exist.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postmortem import api
from postmortem.config import (
    KEEP_PATTERN,
    Facts,
    collect_facts,
    extract_config,
    is_ipv6,
    is_unbracketed_ipv6,
    parse_command,
    version_tuple,
)
from postmortem.config_rules import ConfigRule, check_config, config_rules_of, parse_config_rule
from postmortem.errors import RuleError
from postmortem.rule_engine import EXPLANATION_HEADINGS, load_rules, run_examples
from postmortem.schema import conform
from tests.conftest import SAMPLES

IPV6 = "2605:340:cd51:4b00:9b86:912c:6586:d4d0"
# seed 004, node N's command exactly as posted (the quotes of --lr_scheduler_kwargs included)
SEED004 = (
    "torchrun --nnodes=2 --node_rank={rank} --nproc_per_node=2 --master_addr=" + IPV6 + " --master_port=10217 "
    "./swift_pt.py --model ./workdir/base_model --model_type qwen3 --dataset ./workdir/dataset/shuffled_dataset.jsonl "
    "--output_dir ./workdir/swift_output --dataloader_num_workers 10 --dataset_num_proc 10 --attn_impl flash_attn "
    "--max_steps 400 --max_length 32768 --per_device_train_batch_size 1 --per_device_eval_batch_size 1 "
    "--sequence_parallel_size 1 --learning_rate 1e-5 --warmup_ratio 0.05 --weight_decay 1e-4 --max_grad_norm 1.0 "
    "--gradient_accumulation_steps 8 --save_strategy steps --save_steps 400 --save_total_limit 1 --train_type full "
    "--deepspeed zero3_offload --eval_strategy steps --eval_steps 10 --split_dataset_ratio 0.05 "
    "--lr_scheduler_type warmup_stable_decay --lr_scheduler_kwargs \"{ \"num_decay_steps\": 120, \"num_stable_steps\": 260}\" "
    "--packing True --dataset_shuffle True --train_dataloader_shuffle True --truncation_strategy right "
    "--dataloader_num_workers 4 --model_author swift --model_name swift-robot --log_level detail --logging_steps 1 "
    "--report_to wandb"
)


def seed004(rank: int) -> str:
    return SEED004.replace("{rank}", str(rank))


BANNER = [
    "W0715 10:15:31.204000 23817 torch/distributed/run.py:792] *****************************************",
    "W0715 10:15:31.204000 23817 torch/distributed/run.py:792] Setting OMP_NUM_THREADS environment variable for "
    "each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for "
    "optimal performance in your application as needed. ",
    "W0715 10:15:31.204000 23817 torch/distributed/run.py:792] *****************************************",
]


def lines(*rows: str) -> str:
    return "".join(f"{r}\n" for r in rows)


def facts_of(job: Path) -> Facts:
    """Facts from a job read the way ``analyze`` reads it (the notable-line filter included)."""
    return collect_facts(api.load_timeline(job, keep=KEEP_PATTERN).frame)


def by_rule(analysis: api.Analysis) -> dict:
    return {f.rule: f for f in analysis.report.findings}


@pytest.fixture
def seed004_two_nodes(write_job) -> Path:
    return write_job(
        {
            f"h20-node-{17 + n}/cmd.sh": lines("#!/bin/bash", "cd /data/pt", seed004(n))
            for n in (0, 1)
        }
        | {
            "h20-node-17/console.log": lines(
                *BANNER,
                "[INFO:swift] rank: 0, local_rank: 0, world_size: 4, local_world_size: 2.",
                "[INFO:swift] swift.__version__: 3.5.3",
                "[2025-07-15 10:15:43,228] [INFO] [comm.py:700:init_distributed] Initializing TorchBackend in "
                "DeepSpeed with backend nccl",
            ),
        }
    )


# --------------------------------------------------------------------------- seed 004


def test_seed004_command_becomes_facts(seed004_two_nodes: Path) -> None:
    facts = facts_of(seed004_two_nodes)
    v = facts.values
    assert v["launcher.name"] == "torchrun"
    assert (v["topology.nnodes"], v["topology.nproc_per_node"], v["topology.world_size"]) == (2, 2, 4)
    assert v["topology.node_ranks"] == [0, 1]
    assert v["topology.hosts"] == ["h20-node-17", "h20-node-18"]
    assert v["launcher.master_addr"] == IPV6
    assert v["launcher.master_port"] == 10217
    assert v["launcher.commands"] == 2
    assert v["script.path"] == "./swift_pt.py"
    # argparse keeps the last of the two values; the duplicate is recorded in order
    assert v["script.duplicates"] == {"dataloader_num_workers": [10, 4]}
    assert v["trainer.dataloader_workers"] == 4
    assert (v["trainer.zero_stage"], v["trainer.offload"]) == (3, "cpu")
    assert (v["trainer.max_steps"], v["trainer.eval_steps"], v["trainer.save_steps"]) == (400, 10, 400)
    assert (v["trainer.seq_len"], v["trainer.packing"], v["trainer.grad_accum"]) == (32768, True, 8)
    assert v["trainer.eval_split"] == 0.05
    assert v["script_args.lr_scheduler_kwargs"] == "{ num_decay_steps: 120, num_stable_steps: 260}"
    assert v["env.OMP_NUM_THREADS"] == 1  # torchrun's banner
    assert v["versions.ms-swift"] == "3.5.3"
    assert v["topology.backend"] == "nccl"
    # the node-0 command is the one described; its line is the source
    assert facts.sources["launcher.master_addr"].where == "h20-node-17/cmd.sh:3"
    assert "launcher.mismatched_args" not in v  # the nodes differ only in --node_rank


def test_config_checks_fire_on_seed004_launch_command(seed004_two_nodes: Path) -> None:
    found = by_rule(api.analyze(seed004_two_nodes))
    ipv6 = found["config-ipv6-master-addr"]
    assert ipv6.message == f"IPv6 master address without [ ]: master_addr={IPV6}"
    assert (ipv6.evidence[0].file, ipv6.evidence[0].line) == ("h20-node-17/cmd.sh", 3)
    span = ipv6.evidence[0].span
    assert span is not None and ipv6.evidence[0].text[span[0] : span[1]] == IPV6
    dup = found["config-duplicated-cli-argument"]
    assert dup.message == "given twice, the last value wins: --dataloader_num_workers 10 then 4"
    assert dup.fields["script.duplicates"] == {"dataloader_num_workers": [10, 4]}
    iface = found["config-ipv6-master-without-socket-ifname"]
    assert iface.message.startswith("2 nodes rendezvous at IPv6 master_addr=" + IPV6)
    for f in (ipv6, dup, iface):
        assert (f.category, f.severity, f.rule_role) == ("environment_config", "warning", "context")
        assert "## What a match does not prove" in f.explanation and f.fix
    # one node x four: the same command without the rendezvous flags raises no IPv6 check
    assert "config-launch-args-differ-across-nodes" not in found


def test_one_node_run_keeps_only_the_duplicate(write_job) -> None:
    one = seed004(0).replace(
        f"--nnodes=2 --node_rank=0 --nproc_per_node=2 --master_addr={IPV6} --master_port=10217", "--nproc_per_node=4"
    )
    job = write_job({"cmd.sh": lines("#!/bin/bash", one), "console.log": lines(*BANNER)})
    found = by_rule(api.analyze(job))
    assert "config-duplicated-cli-argument" in found
    assert not {"config-ipv6-master-addr", "config-ipv6-master-without-socket-ifname"} & set(found)
    facts = facts_of(job)
    assert (facts.get("topology.nnodes"), facts.get("topology.nproc_per_node")) == (1, 4)  # torchrun's default


def test_launch_args_differing_between_nodes(write_job) -> None:
    job = write_job(
        {
            "node-a/cmd.sh": lines(seed004(0)),
            "node-b/cmd.sh": lines(seed004(1).replace("--master_port=10217", "--master_port=10218")),
        }
    )
    finding = by_rule(api.analyze(job))["config-launch-args-differ-across-nodes"]
    assert finding.fields["launcher.mismatched_args"] == {"master_port": {"node-a": 10217, "node-b": 10218}}
    assert finding.nodes == ["node-a", "node-b"]


# --------------------------------------------------------------------------- sources of facts


def test_multiline_launch_script_with_variables(write_job) -> None:
    # seed 000's four-node run.sh: continuation lines and ${VAR}s resolved from the script
    job = write_job(
        {
            "atlas800-11/run.sh": lines(
                "#!/bin/bash",
                "MODEL=/data/models/Qwen3-30B-A3B",
                "RANK=0",
                "MASTER_ADDR=10.90.3.11",
                "",
                "torchrun --nnodes=4 --nproc_per_node=8 --node_rank=${RANK} \\",
                "    --master_addr=${MASTER_ADDR} --master_port=29581 \\",
                "    scripts/train_lm.py examples/demo_trainer/train.yaml \\",
                "    --model.pretrained_model_name_or_path=${MODEL} \\",
                "    --training.global_batch_size=32 \\",
                "    --training.train_iters=25",
            )
        }
    )
    v = facts_of(job).values
    assert v["launcher.master_addr"] == "10.90.3.11"
    assert v["launcher.node_rank"] == 0
    assert (v["topology.nnodes"], v["topology.nproc_per_node"], v["topology.world_size"]) == (4, 8, 32)
    assert v["script.path"] == "scripts/train_lm.py"
    assert v["script.positional"] == ["examples/demo_trainer/train.yaml"]
    assert v["script_args.model.pretrained_model_name_or_path"] == "/data/models/Qwen3-30B-A3B"
    assert (v["trainer.max_steps"], v["trainer.global_batch_size"]) == (25, 32)
    assert v["env.MASTER_ADDR"] == "10.90.3.11"


def test_environment_from_exports_nccl_and_hccl_lines(write_job) -> None:
    job = write_job(
        {
            "node-a/console.log": lines(
                "export NCCL_SOCKET_IFNAME=eth0",
                "NCCL_IB_DISABLE=1 torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --master_addr=10.0.0.1 "
                "--master_port=29500 train.py",
                "gpu-node-1:183006:183006 [0] NCCL INFO NCCL_DEBUG set by environment to INFO.",
                "[2026-07-01 15:18:55 TP7] get env HCCL_BUFFSIZE = 200",
            ),
            "node-b/console.log": lines(
                "export NCCL_SOCKET_IFNAME=ib0",
                "NCCL_IB_DISABLE=1 torchrun --nnodes=2 --node_rank=1 --nproc_per_node=8 --master_addr=10.0.0.1 "
                "--master_port=29500 train.py",
            ),
        }
    )
    facts = facts_of(job)
    v = facts.values
    assert v["env.NCCL_SOCKET_IFNAME"] == "eth0"  # first node's value; the difference is below
    assert v["env.NCCL_IB_DISABLE"] == 1  # the command's own prefix
    assert v["env.NCCL_DEBUG"] == "INFO"  # trailing period dropped
    assert v["env.HCCL_BUFFSIZE"] == 200
    assert v["env_by_node.node-a"] == {"NCCL_SOCKET_IFNAME": "eth0"}
    assert v["env_by_node.node-b"] == {"NCCL_SOCKET_IFNAME": "ib0"}
    assert facts.sources["env.NCCL_DEBUG"].where == "node-a/console.log:3"


def every_second(text: str, n: int) -> str:
    """``n`` logging lines a second apart (``{s}`` in ``text`` is the second)."""
    return "".join(
        f"2026-11-20 {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d},000 - INFO - {text.format(s=s)}\n" for s in range(n)
    )


@pytest.mark.parametrize(
    "chatty",
    [
        # every step of every rank says how many tokens its batch had: no launch fact, no data size
        {
            f"node-{n}/logs/rank_{r}.log": every_second("swift - data loader fetched batch of 32768 tokens in 0.0{s}s", 24000)
            for n, r in (("a", 0), ("b", 1))
        },
        # a line that looks like one (it names a backend), printed every step by one rank
        {"node-a/logs/rank_0.log": every_second("ckpt - backend io_uring queue {s}", 30000)},
    ],
    ids=["per-batch-tokens", "one-chatty-file"],
)
def test_lines_printed_every_step_do_not_crowd_out_the_launch_facts(write_job, chatty: dict[str, str]) -> None:
    # more candidate rows than the budget: every file's first candidates are still read
    job = write_job(
        {
            "node-a/console.log": lines("export NCCL_SOCKET_IFNAME=eth0"),
            "node-b/console.log": lines("export NCCL_SOCKET_IFNAME=ib0"),
            **chatty,
        }
    )
    v = facts_of(job).values
    assert v["env_by_node.node-a"] == {"NCCL_SOCKET_IFNAME": "eth0"}
    assert v["env_by_node.node-b"] == {"NCCL_SOCKET_IFNAME": "ib0"}
    assert "dataset.total_tokens" not in v  # 32768 is one batch, not the data


def test_trainer_echoes_survive_the_notable_filter(write_job) -> None:
    # ms-swift's multi-line TrainArguments dump and HF's training / evaluation blocks: their
    # lines are plain info lines that the timeline keeps only because config rules ask for them
    job = write_job(
        {
            "console.log": lines(
                "[INFO:swift] args: TrainArguments(",
                "_n_gpu=-1,",
                "per_device_train_batch_size=2,",
                "gradient_accumulation_steps=16,",
                "max_steps=-1,",
                "dataloader_num_workers=1,",
                ")",
                "[INFO:swift] Setting args.dataloader_num_workers: 2",
                "***** Running training *****",
                "  Num examples = 12,345",
                "  Num Epochs = 3",
                "  Instantaneous batch size per device = 2",
                "  Total train batch size (w. parallel, distributed & accumulation) = 256",
                "  Gradient Accumulation steps = 16",
                "  Total optimization steps = 144",
                "***** Running Evaluation *****",
                "  Num examples = 651",
                "  Batch size = 1",
            )
        }
    )
    v = api.analyze(job)  # the real path: keep pattern from the rule set
    facts = collect_facts(v.timeline.frame).values
    assert facts["trainer.micro_batch_size"] == 2
    assert facts["trainer.grad_accum"] == 16
    assert facts["trainer.dataloader_workers"] == 2  # "Setting args." overrides the dump
    assert facts["trainer.max_steps"] == 144  # -1 means "not set" and is ignored
    assert facts["trainer.global_batch_size"] == 256
    assert facts["trainer.num_epochs"] == 3
    assert facts["trainer.eval_batch_size"] == 1
    assert (facts["dataset.train_samples"], facts["dataset.eval_samples"]) == (12345, 651)


def test_deepspeed_config_print_and_versions(write_job) -> None:
    job = write_job(
        {
            "console.log": lines(
                "[2024-05-01 10:00:00,001] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2, "
                "git-hash=unknown, git-branch=unknown",
                "[2024-05-01 10:00:01,002] [INFO] [config.py:1003:print]   train_micro_batch_size_per_gpu  1",
                "[2024-05-01 10:00:01,002] [INFO] [config.py:1003:print]   zero_config .................. stage=3 "
                "contiguous_gradients=True offload_param=DeepSpeedZeroOffloadParamConfig(device='cpu', nvme_path=None) "
                "offload_optimizer=DeepSpeedZeroOffloadOptimizerConfig(device='cpu', nvme_path=None)",
                "gpu-node-1:183006:183006 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
                "torch                             2.4.0",
                "torch-npu                         2.4.0.post4",
                "transformers==4.57.1",
            )
        }
    )
    v = facts_of(job).values
    assert (v["trainer.zero_stage"], v["trainer.offload"], v["trainer.micro_batch_size"]) == (3, "cpu", 1)
    assert v["versions.deepspeed"] == "0.14.2"
    assert (v["versions.NCCL"], v["versions.CUDA"]) == ("2.21.5", "12.4")
    assert (v["versions.torch"], v["versions.torch_npu"]) == ("2.4.0", "2.4.0.post4")
    assert v["versions.transformers"] == "4.57.1"


def test_interfaces_and_the_multinode_check(write_job) -> None:
    cmd = "+ torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --master_addr=10.0.0.1 --master_port=29500 train.py"
    job = write_job(
        {
            "node-a/console.log": lines(
                cmd,
                "gpu-node-1:183006:183006 [0] NCCL INFO Bootstrap : Using ib0:10.1.0.1<0>",
                "gpu-node-1:183006:183006 [0] NCCL INFO NET/Socket : Using [0]ib0:10.1.0.1<0> [1]eth0:10.0.0.1<0>",
                "gpu-node-1:183006:183006 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB ib0:10.1.0.1<0>",
            ),
            "node-a/ip_addr.txt": lines(
                "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN group default qlen 1000",
                "2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP group default qlen 1000",
                "5: docker0: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 1500 qdisc noqueue state DOWN group default",
            ),
        }
    )
    analysis = api.analyze(job)
    v = collect_facts(analysis.timeline.frame).values
    assert v["network.interfaces"] == ["docker0", "eth0", "ib0"]  # lo is never a candidate
    assert v["network.ib_devices"] == ["mlx5_0", "mlx5_1"]
    finding = by_rule(analysis)["config-multinode-no-socket-ifname"]
    assert finding.message == "2 nodes, interfaces seen: docker0, eth0, ib0; no NCCL/GLOO/HCCL_SOCKET_IFNAME in the logs"


def test_extract_config_is_json_with_sources(seed004_two_nodes: Path) -> None:
    frame = api.load_timeline(seed004_two_nodes, keep=KEEP_PATTERN).frame
    record = extract_config(frame)
    assert list(record)[:3] == ["topology", "launcher", "script"]
    assert record["topology"]["world_size"] == 4
    assert record["sources"]["launcher.master_addr"] == "h20-node-17/cmd.sh:3"
    again = json.loads(json.dumps(record))
    assert again == record
    back = Facts.from_dict(again)
    assert back.values == collect_facts(frame).values
    assert back.sources["launcher.master_addr"].line == 3


def test_empty_and_unrelated_timelines_give_no_facts() -> None:
    assert extract_config(conform(pl.DataFrame())) == {"sources": {}}
    frame = conform(pl.DataFrame({"file": ["a.log"], "line": [1], "message": ["hello world"], "kind": ["info"]}))
    assert collect_facts(frame).values == {}


def test_extraction_reads_only_candidate_rows() -> None:
    # 300k rows of chatter around a few config lines: one vectorized pass, then Python on a handful
    n = 300_000
    chatter = pl.DataFrame(
        {
            "file": ["rank0.log"] * n,
            "line": list(range(1, n + 1)),
            "message": [f"[INFO|trainer.py:{i % 97}] heartbeat {i}" for i in range(n)],
            "kind": ["info"] * n,
        }
    )
    special = pl.DataFrame(
        {
            "file": ["run.sh", "run.sh"],
            "line": [1, 2],
            "message": ["export NCCL_SOCKET_IFNAME=eth0", "torchrun --nproc_per_node=8 train.py --max_steps 100"],
            "kind": ["info", "info"],
        }
    )
    frame = conform(pl.concat([chatter, special]))
    start = time.perf_counter()
    facts = collect_facts(frame)
    elapsed = time.perf_counter() - start
    assert facts.values["env.NCCL_SOCKET_IFNAME"] == "eth0"
    assert facts.values["trainer.max_steps"] == 100
    assert elapsed < 10, f"{elapsed:.1f}s"  # generous: shared 2-core machine; typically well under 1 s


# --------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("value", "v6", "bare"),
    [
        (IPV6, True, True),
        ("fd00:a:b::11", True, True),
        ("[2605:340::d4d0]", True, False),
        ("::1", True, True),
        ("10.90.3.11", False, False),
        ("node-17", False, False),
        ("10:15:31", False, False),
    ],
)
def test_ipv6_literals(value: str, v6: bool, bare: bool) -> None:
    assert (is_ipv6(value), is_unbracketed_ipv6(value)) == (v6, bare)


def test_version_tuples() -> None:
    assert version_tuple("2.4.0.post4") == (2, 4, 0)
    assert version_tuple("v2.7") == (2, 7)
    assert version_tuple("unknown") is None


def test_parse_command_variants() -> None:
    src = None
    cmd = parse_command(
        "/usr/bin/python -m torch.distributed.run --nproc_per_node 4 /opt/swift/cli/sft.py --model m --lr 1e-5",
        src,  # type: ignore[arg-type]
    )
    assert cmd is not None and cmd.launcher == "torchrun" and cmd.script == "/opt/swift/cli/sft.py"
    assert cmd.launcher_args == {"nproc_per_node": ["4"]} and cmd.script_args["lr"] == ["1e-5"]
    srun = parse_command("srun -N 2 --ntasks-per-node=1 torchrun --nnodes=2 --nproc_per_node=8 train.py", src)  # type: ignore[arg-type]
    assert srun is not None and srun.wrapper == "srun" and srun.launcher_args["nnodes"] == ["2"]
    assert srun.launcher_args["srun_N"] == ["2"]
    acc = parse_command(
        "accelerate launch --multi_gpu --num_machines 2 --machine_rank 1 --main_process_ip 10.0.0.1 train.py --bs 8",
        src,  # type: ignore[arg-type]
    )
    assert acc is not None and acc.launcher == "accelerate" and acc.script == "train.py"
    assert acc.launcher_args["multi_gpu"] == [True] and acc.launcher_args["num_machines"] == ["2"]
    piped = parse_command("deepspeed --num_gpus 8 train.py --zero_stage 3 2>&1 | tee train.log", src)  # type: ignore[arg-type]
    assert piped is not None and piped.script_args == {"zero_stage": ["3"]} and piped.positional == []


# --------------------------------------------------------------------------- the rule files


def test_config_rules_load_as_rules_and_pass_their_examples() -> None:
    rules = load_rules()
    config = config_rules_of(rules)
    assert len(config) >= 12
    assert all(isinstance(r, ConfigRule) and r.group == "config" and r.match.scope == "config" for r in config)
    results = run_examples(rules.subset(r.id for r in config))
    bad = [f"{r.id}: {r.detail}" for r in results if not r.ok]
    assert not bad
    assert sum(r.expected for r in results) >= len(config)  # every check has a firing example
    for rule in config:
        for heading in EXPLANATION_HEADINGS:
            assert heading in rule.explanation, (rule.id, heading)
        assert rule.fix and rule.references


def test_keep_pattern_includes_config_lines_only_with_config_rules() -> None:
    rules = load_rules()
    assert KEEP_PATTERN in (rules.keep_pattern() or "")
    without = rules.subset(r.id for r in rules if not isinstance(r, ConfigRule))
    assert KEEP_PATTERN not in (without.keep_pattern() or "")


BAD_RULES = {
    "unknown test": ('{ fact = "topology.nnodes", bigger = 1 }', '"config.all[0].bigger"', "exactly one test"),
    "two tests": ('{ fact = "topology.nnodes", greater_than = 1, less_than = 9 }', "exactly one test", ""),
    "bad fact": ('{ fact = "nnodes", greater_than = 1 }', '"config.all[0].fact"', "fact key"),
    "bad type": ('{ fact = "topology.nnodes", greater_than = "1" }', '"config.all[0].greater_than"', "a number"),
    "bad regex": ('{ fact = "launcher.master_addr", matches = "(" }', '"config.all[0].matches"', "Python regex"),
    "bad version": ('{ fact = "versions.torch", version_below = "new" }', '"config.all[0].version_below"', "version"),
}


@pytest.mark.parametrize("case", sorted(BAD_RULES))
def test_bad_config_rules_name_file_and_field(tmp_path: Path, case: str) -> None:
    condition, field, why = BAD_RULES[case]
    path = tmp_path / "config" / "config-bad.toml"
    path.parent.mkdir()
    path.write_text(
        'id = "config-bad"\ntitle = "t"\ncategory = "environment_config"\nseverity = "info"\nrole = "context"\n'
        'explanation = "x"\nfix = "y"\n\n[config]\nall = [ ' + condition + " ]\n",
        encoding="utf-8",
    )
    with pytest.raises(RuleError) as err:
        load_rules([tmp_path], builtin=False)
    text = str(err.value)
    assert text.startswith(f"{tmp_path.name}/config/config-bad.toml: ")
    assert field in text and why in text


def test_config_and_match_cannot_mix(tmp_path: Path) -> None:
    data = {
        "id": "config-mixed", "title": "t", "category": "environment_config", "severity": "info", "role": "context",
        "explanation": "x", "fix": "y", "match": {"any": ["x"]},
        "config": {"all": [{"fact": "topology.nnodes", "present": True}]},
    }
    with pytest.raises(RuleError, match=r'"match" cannot be combined with \[config\]'):
        parse_config_rule(data, tmp_path / "config-mixed.toml", "config-mixed.toml")


def test_user_rule_overrides_a_config_rule_by_id(tmp_path: Path, seed004_two_nodes: Path) -> None:
    # a user's copy of config-duplicated-cli-argument that never fires replaces the built-in one
    (tmp_path / "config-duplicated-cli-argument.toml").write_text(
        'id = "config-duplicated-cli-argument"\ntitle = "off"\ncategory = "environment_config"\n'
        'severity = "info"\nrole = "context"\nexplanation = "x"\nfix = "y"\n\n'
        '[config]\nall = [ { fact = "topology.nnodes", greater_than = 1000 } ]\n',
        encoding="utf-8",
    )
    rules = load_rules([tmp_path])
    assert "config-duplicated-cli-argument" in rules.overridden
    facts = facts_of(seed004_two_nodes)
    assert "config-duplicated-cli-argument" not in {f.rule for f in check_config(facts, rules)}
    assert "config-ipv6-master-addr" in {f.rule for f in check_config(facts, rules)}


# --------------------------------------------------------------------------- corpus


def corpus(name: str) -> Path:
    job = SAMPLES / name / "job"
    assert job.is_dir(), f"corpus job {name} is missing (tools/corpus/generate.py, tools/reconstruct)"
    return job


def test_corpus_seed000_arithmetic() -> None:
    single = by_rule(api.analyze(corpus("reconstructed/seed000_single_node")))["config-train-iters-exceed-data"]
    assert single.message == "100 steps configured, the data supports 76.8 (2,517,232 tokens / 32,768 tokens per step)"
    four = by_rule(api.analyze(corpus("reconstructed/seed000_four_nodes")))["config-train-iters-exceed-data"]
    assert four.fields["derived.supported_steps"] == 19.2 and four.fields["trainer.max_steps"] == 25
    # the fix names this job's own number, not another job's
    assert "at or below the supported number (19.2)" in four.fix and "{" not in four.fix


def test_corpus_seed004_reconstructed_launch_checks() -> None:
    found = by_rule(api.analyze(corpus("reconstructed/seed004_two_nodes_hang")))
    assert {"config-ipv6-master-addr", "config-duplicated-cli-argument", "config-ipv6-master-without-socket-ifname"} <= set(found)
    assert found["config-ipv6-master-addr"].evidence[0].file == "h20-node-17/cmd.sh"


def test_corpus_seed004_real_split_per_node() -> None:
    found = by_rule(api.analyze(corpus("real/seed004_two_nodes_hang")))
    split = found["config-data-split-differs-across-nodes"]
    assert split.fields["dataset.eval_samples_by_node"] == {"node-a": 20, "node-b": 21}
    assert split.nodes == ["node-a", "node-b"]
    assert found["config-duplicated-cli-argument"].message.endswith("--dataloader_num_workers 10 then 4")


def test_corpus_seed003_old_torch_teardown() -> None:
    found = by_rule(api.analyze(corpus("reconstructed/seed003_p9_watchdog_after_checkpoint")))
    assert found["config-torch-npu-old-torch-teardown"].message == (
        "torch 2.4; HCCL watchdog exception after training finished"
    )


# --------------------------------------------------------------------------- robustness

_PIECES = st.sampled_from(
    [
        "torchrun", "--nnodes=2", "--master_addr=", "::", "\\", "'", '"', "=", ": ", "NCCL_SOCKET_IFNAME", "export ",
        "num_rows: ", "Dataset({", "***** Running Evaluation *****", "  Num examples = ", "2>&1 |", "${RANK}",
        "--max_steps", "zero_optimization", "'stage': ", "offload_param=", "NET/Socket : Using [0]", "12", "-1",
        "1e-5", "deepspeed", "srun -N", "accelerate launch", "python -m torch.distributed.run", " ", "\t", "x.py",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_PIECES, max_size=12).map("".join), min_size=1, max_size=8))
def test_extraction_never_raises_on_odd_lines(rows: list[str]) -> None:
    frame = conform(
        pl.DataFrame(
            {
                "file": ["a/run.sh"] * len(rows),
                "line": list(range(1, len(rows) + 1)),
                "node": ["a"] * len(rows),
                "message": rows,
                "kind": ["info"] * len(rows),
            }
        )
    )
    record = extract_config(frame)
    json.dumps(record)  # always JSON
    check_config(Facts.from_dict(record), _config_rules())


@lru_cache(maxsize=1)
def _config_rules() -> list[ConfigRule]:
    return config_rules_of(load_rules())
