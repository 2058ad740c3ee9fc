"""Self-supervised pretraining of a backbone on unlabeled images (`retrieval pretrain`)."""
