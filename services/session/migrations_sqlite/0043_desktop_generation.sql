-- SQLite dialect of migrations/0043: the generation of the connection that last registered a desktop.
ALTER TABLE desktops ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
