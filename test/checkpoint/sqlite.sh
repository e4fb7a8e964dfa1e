# sqlite3 with its database open in /tmp across the checkpoint: rows go
# in one statement at a time from a pipe (sqlite3 reads it as it comes),
# and every few rows a query reads them back through the open file.
db=/tmp/sbx-ckpt-sqlite.$$.db
rm -f "$db" "$db-journal"
{
  echo "create table t (k integer primary key, v text);"
  for i in $(seq 1 60); do
    echo "insert into t (v) values ('row $i ');"
    if [ $((i % 5)) = 0 ]; then
      echo "select count(*), sum(k), max(v) from t;"
    fi
    sleep 0.02
  done
  echo "select count(*), sum(length(v)) from t;"
} | sqlite3 "$db"
echo "after: $(sqlite3 "$db" 'select count(*) from t;')"
rm -f "$db" "$db-journal"
