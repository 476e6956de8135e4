-- A result store written by commlens 0.1.0 before Alembic (git a0e9b0e: Store.open's create_all,
-- schema_version = 1, no alembic_version table), dumped with Python's sqlite3 iterdump.
-- Schema revision 0001. Used by tests/test_store_migrations.py; do not regenerate.
BEGIN TRANSACTION;
CREATE TABLE measurements (
	id INTEGER NOT NULL, 
	run_id VARCHAR NOT NULL, 
	position INTEGER NOT NULL, 
	op VARCHAR NOT NULL, 
	algo VARCHAR NOT NULL, 
	dtype VARCHAR NOT NULL, 
	redop VARCHAR NOT NULL, 
	root INTEGER NOT NULL, 
	size_bytes BIGINT NOT NULL, 
	count BIGINT NOT NULL, 
	in_place BOOLEAN NOT NULL, 
	world_size INTEGER NOT NULL, 
	nwrong BIGINT, 
	mean_s FLOAT NOT NULL, 
	p50_s FLOAT NOT NULL, 
	p95_s FLOAT NOT NULL, 
	p99_s FLOAT NOT NULL, 
	min_s FLOAT NOT NULL, 
	max_s FLOAT NOT NULL, 
	cv FLOAT NOT NULL, 
	algbw_bytes_per_s FLOAT NOT NULL, 
	busbw_bytes_per_s FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_measurements_run_position UNIQUE (run_id, position), 
	FOREIGN KEY(run_id) REFERENCES runs (run_id) ON DELETE CASCADE
);
INSERT INTO "measurements" VALUES(1,'legacy0a1b2c3d4e5f',0,'all_reduce','builtin','float32','sum',-1,8,2,0,8,0,1.49999999999999986859e-05,1.5e-05,1.725e-05,1.74499999999999972515e-05,1.25e-05,1.75e-05,1.66666666666666629659e-01,5.33333333333333372118e+05,9.33333333333333372162e+05);
INSERT INTO "measurements" VALUES(2,'legacy0a1b2c3d4e5f',1,'all_reduce','builtin','float32','sum',-1,8,2,1,8,0,1.00007000000000012551e-01,1.1e-05,0.2700011,2.94000220000000034303e-01,1.0e-05,3.00000000000000044408e-01,1.73186895497098158891e+00,7.99944003919725474824e+01,1.39990200685951947432e+02);
INSERT INTO "measurements" VALUES(3,'legacy0a1b2c3d4e5f',2,'all_reduce','builtin','float32','sum',-1,1048576,262144,0,8,0,6.11666666666666716985e-05,6.1e-05,6.19e-05,6.198e-05,6.05e-05,6.2e-05,1.24865822750840592403e-02,1.71429318801089897151e+10,3.00001307901907310489e+10);
INSERT INTO "measurements" VALUES(4,'legacy0a1b2c3d4e5f',3,'all_gather','builtin','float32','none',-1,1048576,262144,0,8,0,4.07777777777777833932e-05,4.4e-05,4.49e-05,4.498e-05,3.33333333333333349307e-05,4.5e-05,1.58577488032168506526e-01,2.57143978201634826655e+10,2.25000980926430473321e+10);
INSERT INTO "measurements" VALUES(5,'legacy1f2e3d4c5b6a',0,'all_reduce','builtin','float32','sum',-1,8,2,0,8,NULL,1.45e-05,1.45e-05,1.585e-05,1.59699999999999978691e-05,1.3e-05,1.6e-05,1.4629795472825121716e-01,5.51724137931034434596e+05,9.65517241379310260564e+05);
INSERT INTO "measurements" VALUES(6,'legacy1f2e3d4c5b6a',1,'broadcast','tree','bfloat16','none',3,4096,1024,0,8,NULL,2.25e-05,2.25e-05,2.47500000000000018986e-05,2.495e-05,2.0e-05,2.5e-05,1.57134840263677216798e-01,1.82044444444444447755e+08,1.82044444444444447755e+08);
INSERT INTO "measurements" VALUES(7,'legacy2aaaabbbbcccc',0,'reduce_scatter','builtin','float32','max',-1,65536,16384,0,4,2,9.99999999999999912396e-05,2.22507385850720138345e-308,2.69999999999999949241e-04,0.000294,4.94065645841247e-324,0.0003,1.73205080756887719317e+00,655360000.0,491520000.0);
INSERT INTO "measurements" VALUES(8,'legacy2aaaabbbbcccc',1,'barrier','builtin','float32','none',-1,0,0,0,4,NULL,1.0e-06,1.0e-06,1.0e-06,1.0e-06,1.0e-06,1.0e-06,0.0,0.0,0.0);
CREATE TABLE runs (
	run_id VARCHAR NOT NULL, 
	started_at VARCHAR NOT NULL, 
	started_at_utc DATETIME NOT NULL, 
	finished_at VARCHAR, 
	status VARCHAR(16) NOT NULL, 
	tag VARCHAR, 
	revision VARCHAR, 
	command_line VARCHAR NOT NULL, 
	source VARCHAR NOT NULL, 
	world_size INTEGER NOT NULL, 
	backend VARCHAR NOT NULL, 
	device VARCHAR NOT NULL, 
	fingerprint VARCHAR(32) NOT NULL, 
	nhosts INTEGER NOT NULL, 
	commlens_version VARCHAR NOT NULL, 
	avg_busbw_bytes_per_s FLOAT NOT NULL, 
	system JSON NOT NULL, 
	config JSON NOT NULL, 
	notes JSON NOT NULL, 
	PRIMARY KEY (run_id), 
	CONSTRAINT ck_runs_status CHECK (status IN ('complete', 'incomplete'))
);
INSERT INTO "runs" VALUES('legacy0a1b2c3d4e5f','2024-04-30T22:15:00.250000Z','2024-04-30 22:15:00.250000','2024-04-30T22:16:02Z','complete','nightly','a1b2c3d','commlens bench --nproc 8 -b 8 -e 1M -f 1024','commlens',8,'nccl','cuda','077472a7e0c4c3b6',1,'0.1.0',1.31252905890393295289e+10,'{"world_size": 8, "hosts": ["gpu-01"], "ranks_per_host": {"gpu-01": 8}, "backend": "nccl", "backend_version": "2.19.3", "device": "cuda", "device_names": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"], "torch_version": "2.4.0", "python_version": "3.11.7", "cpu_model": "Xeon 8480", "cpu_cores": 112, "os": "Linux-6.5", "commlens_version": "0.1.0", "env": {"NCCL_ALGO": "Ring"}, "extra": {"slurm_job": "77"}}','{"iters": 3, "warmup_iters": 1}','[]');
INSERT INTO "runs" VALUES('legacy1f2e3d4c5b6a','2024-05-01T09:00:00+02:00','2024-05-01 07:00:00.000000',NULL,'complete','nightly','b2c3d4e','','commlens',8,'nccl','cuda','077472a7e0c4c3b6',1,'0.1.0',9.15049808429118841871e+07,'{"world_size": 8, "hosts": ["gpu-01"], "ranks_per_host": {"gpu-01": 8}, "backend": "nccl", "backend_version": "2.19.3", "device": "cuda", "device_names": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"], "torch_version": "2.4.0", "python_version": "3.11.7", "cpu_model": "Xeon 8480", "cpu_cores": 112, "os": "Linux-6.5", "commlens_version": "0.1.0", "env": {"NCCL_ALGO": "Ring"}, "extra": {"slurm_job": "77"}}','{}','[]');
INSERT INTO "runs" VALUES('legacy2aaaabbbbcccc','2024-05-02T03:30:00Z','2024-05-02 03:30:00.000000',NULL,'incomplete',NULL,NULL,'','nccl-tests',4,'gloo','cpu','e14dabc359e3d890',2,'0.1.0',491520000.0,'{"world_size": 4, "hosts": ["node-a", "node-b"], "ranks_per_host": {"node-a": 2, "node-b": 2}, "backend": "gloo", "backend_version": "", "device": "cpu", "device_names": [], "torch_version": "2.4.0", "python_version": "3.11.7", "cpu_model": "Xeon 8480", "cpu_cores": 112, "os": "Linux-6.5", "commlens_version": "0.1.0", "env": {"NCCL_ALGO": "Ring"}, "extra": {"slurm_job": "77"}}','{}','["rank 3 slow"]');
CREATE TABLE samples (
	measurement_id INTEGER NOT NULL, 
	samples_s JSON NOT NULL, 
	rank_samples_s JSON, 
	PRIMARY KEY (measurement_id), 
	FOREIGN KEY(measurement_id) REFERENCES measurements (id) ON DELETE CASCADE
);
INSERT INTO "samples" VALUES(1,'[1.5e-05, 1.25e-05, 1.75e-05]',NULL);
INSERT INTO "samples" VALUES(2,'[1e-05, 1.1e-05, 0.30000000000000004]',NULL);
INSERT INTO "samples" VALUES(3,'[6.1e-05, 6.2e-05, 6.05e-05]',NULL);
INSERT INTO "samples" VALUES(4,'[4.4e-05, 4.5e-05, 3.3333333333333335e-05]',NULL);
INSERT INTO "samples" VALUES(5,'[1.6e-05, 1.3e-05]',NULL);
INSERT INTO "samples" VALUES(6,'[2e-05, 2.5e-05]','[[2e-05, 2.5e-05], [1.9900000000000003e-05, 2.4900000000000002e-05], [1.98e-05, 2.48e-05], [1.97e-05, 2.47e-05], [1.9600000000000002e-05, 2.46e-05], [1.9500000000000003e-05, 2.4500000000000003e-05], [1.94e-05, 2.44e-05], [1.93e-05, 2.43e-05]]');
INSERT INTO "samples" VALUES(7,'[0.0003, 5e-324, 2.2250738585072014e-308]',NULL);
INSERT INTO "samples" VALUES(8,'[1e-06]',NULL);
CREATE TABLE schema_version (
	version INTEGER NOT NULL, 
	PRIMARY KEY (version)
);
INSERT INTO "schema_version" VALUES(1);
CREATE INDEX ix_runs_started_at_utc ON runs (started_at_utc);
CREATE INDEX ix_runs_fingerprint ON runs (fingerprint);
CREATE INDEX ix_runs_tag ON runs (tag);
CREATE INDEX ix_measurements_op_size_bytes ON measurements (op, size_bytes);
CREATE INDEX ix_measurements_run_id ON measurements (run_id);
COMMIT;
