-- The sqlite3 command-line shell on a script (acceptance.sh, "sqlite").
CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, score REAL);
INSERT INTO t (name, score) VALUES ('ada', 9.5), ('bob', 7.25), ('cy', 8.0);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000)
INSERT INTO t (name, score) SELECT 'n' || x, x % 10 FROM c;
.headers on
.mode column
SELECT name, score FROM t WHERE id <= 3 ORDER BY score DESC;
SELECT count(*) AS n, sum(score) AS total FROM t;
CREATE INDEX t_score ON t (score);
SELECT score, count(*) FROM t GROUP BY score ORDER BY score LIMIT 3;
