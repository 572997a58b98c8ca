package rosbag2

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite behind database/sql's "sqlite" driver
)

// db3 reads one sqlite3 storage file of rosbag2: the topics table (its
// columns vary by distro: Foxy has no QoS, Humble no type hash) and the
// messages table, in timestamp order through rosbag2's timestamp index.
type db3 struct {
	path  string
	db    *sql.DB
	chans []fileChannel
	byID  map[int64]*fileChannel
	meta  string // the newest row of the metadata table (Iron and later), if any
}

func openDB3(path string) (*db3, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	// Read-only: a bag is input, and may lie on a read-only medium.
	dsn := (&url.URL{Scheme: "file", Path: abs, RawQuery: "mode=ro"}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite3 bag %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	d := &db3{path: path, db: db, byID: map[int64]*fileChannel{}}
	if err := d.load(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite3 bag %s: %w", path, err)
	}
	return d, nil
}

func (d *db3) columns(table string) (map[string]bool, error) {
	rows, err := d.db.Query(`SELECT name FROM pragma_table_info(?)`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		cols[name] = true
	}
	return cols, rows.Err()
}

func (d *db3) load() error {
	tc, err := d.columns("topics")
	if err != nil {
		return err
	}
	mc, err := d.columns("messages")
	if err != nil {
		return err
	}
	for _, c := range []string{"id", "name", "type", "serialization_format"} {
		if !tc[c] {
			return fmt.Errorf("not a rosbag2 database: the topics table has no column %q", c)
		}
	}
	for _, c := range []string{"topic_id", "timestamp", "data"} {
		if !mc[c] {
			return fmt.Errorf("not a rosbag2 database: the messages table has no column %q", c)
		}
	}
	q := "SELECT id, name, type, serialization_format, " + orEmpty(tc, "offered_qos_profiles") + ", " +
		orEmpty(tc, "type_description_hash") + " FROM topics ORDER BY id"
	rows, err := d.db.Query(q)
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var c fileChannel
		var id int64
		if err := rows.Scan(&id, &c.Topic, &c.Type, &c.Encoding, &c.QoS, &c.Hash); err != nil {
			rows.Close()
			return err
		}
		d.chans = append(d.chans, c)
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i, id := range ids {
		d.byID[id] = &d.chans[i]
	}
	// Counting reads every row's topic id: it finds a damaged table here
	// rather than part way through.
	rows, err = d.db.Query("SELECT topic_id, COUNT(*) FROM messages GROUP BY topic_id")
	if err != nil {
		return err
	}
	for rows.Next() {
		var id int64
		var n uint64
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return err
		}
		c := d.byID[id]
		if c == nil {
			rows.Close()
			return fmt.Errorf("%d messages on topic id %d, which the topics table does not have", n, id)
		}
		c.Count = n
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if mt, err := d.columns("metadata"); err == nil && mt["metadata"] {
		row := d.db.QueryRow("SELECT metadata FROM metadata ORDER BY id DESC LIMIT 1")
		if err := row.Scan(&d.meta); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
	}
	return nil
}

func orEmpty(cols map[string]bool, c string) string {
	if cols[c] {
		return c
	}
	return "''"
}

func (d *db3) channels() []fileChannel { return d.chans }

// messages yields the messages of topics (all when empty) in timestamp
// order. rosbag2 stores one time per message (the receive time), which is
// both the log and the publish time here.
func (d *db3) messages(ctx context.Context, topics []string) iter.Seq2[fileMessage, error] {
	return func(yield func(fileMessage, error) bool) {
		q := "SELECT topic_id, timestamp, data FROM messages"
		var args []any
		if len(topics) > 0 {
			var ids []string
			for id, c := range d.byID {
				for _, t := range topics {
					if c.Topic == t {
						ids = append(ids, "?")
						args = append(args, id)
					}
				}
			}
			if len(ids) == 0 {
				return
			}
			q += " WHERE topic_id IN (" + strings.Join(ids, ",") + ")"
		}
		q += " ORDER BY timestamp, id"
		rows, err := d.db.QueryContext(ctx, q, args...)
		if err != nil {
			yield(fileMessage{}, err)
			return
		}
		defer rows.Close()
		seq := map[int64]uint32{}
		for rows.Next() {
			var id, ts int64
			var data []byte
			if err := rows.Scan(&id, &ts, &data); err != nil {
				yield(fileMessage{}, err)
				return
			}
			c := d.byID[id]
			if c == nil {
				yield(fileMessage{}, fmt.Errorf("message on topic id %d, which the topics table does not have", id))
				return
			}
			seq[id]++
			t := time.Unix(0, ts).UTC()
			if !yield(fileMessage{Topic: c.Topic, Sequence: seq[id], LogTime: t, PublishTime: t, Data: data}, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(fileMessage{}, err)
		}
	}
}

func (d *db3) close() error { return d.db.Close() }
