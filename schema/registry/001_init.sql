-- registry 001: applications, their components, and each component's PSDB per family
-- (schema/REGISTRY.md). Migrations are never edited once released: later versions add files.
CREATE TABLE applications(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    exe_path TEXT NOT NULL UNIQUE,
    exe_filename TEXT,
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    engine_name TEXT,
    engine_version INTEGER NOT NULL,
    installer TEXT NOT NULL);
CREATE TABLE components(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    app INTEGER NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    sodb_path TEXT,
    UNIQUE(app, name));
CREATE TABLE component_psdbs(
    component INTEGER NOT NULL REFERENCES components(id) ON DELETE CASCADE,
    family TEXT NOT NULL,
    psdb_path TEXT NOT NULL,
    PRIMARY KEY(component, family)) WITHOUT ROWID;
