#!/bin/bash
MODEL=/data/models/Qwen3-30B-A3B
RANK=3
MASTER_ADDR=10.90.3.11

torchrun --nnodes=4 --nproc_per_node=8 --node_rank=${RANK} \
    --master_addr=${MASTER_ADDR} --master_port=29581 \
    scripts/train_lm.py examples/demo_trainer/train.yaml \
    --model.pretrained_model_name_or_path=${MODEL} \
    --dataset.model_assets.tokenizer.pretrained_model_name_or_path=${MODEL} \
    --dataset.data_path=dataset/qwen3-30b-a3b/data/raw/wikitext-2-raw-v1-train.jsonl \
    --dataset.data_config.hf_dataset_name=null \
    --training.global_batch_size=32 \
    --training.train_iters=25
