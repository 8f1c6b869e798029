-- Loaded by each shard container on its first start (docker-entrypoint-initdb.d):
-- the same schema on every shard. accounts is sharded by id; countries is an
-- omni table with the same rows everywhere.
CREATE TABLE accounts (id bigint PRIMARY KEY, email text NOT NULL, balance numeric NOT NULL DEFAULT 0);
CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL);
INSERT INTO countries VALUES ('fr', 'France'), ('jp', 'Japan'), ('br', 'Brazil');
