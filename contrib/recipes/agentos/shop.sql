-- The recipe's database: two small tables, rebuilt from this script at the start of every run.
CREATE TABLE customers (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    city TEXT NOT NULL
);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    item TEXT NOT NULL,
    qty INTEGER NOT NULL,
    price REAL NOT NULL
);
INSERT INTO customers (id, name, city) VALUES
    (1, 'Ada', 'Paris'),
    (2, 'Ben', 'Oslo'),
    (3, 'Chen', 'Paris'),
    (4, 'Dana', 'Lima');
INSERT INTO orders (id, customer_id, item, qty, price) VALUES
    (1, 1, 'pen', 3, 1.5),
    (2, 1, 'ink', 1, 4.0),
    (3, 2, 'pad', 2, 2.5),
    (4, 3, 'pen', 10, 1.5),
    (5, 4, 'lamp', 1, 20.0),
    (6, 2, 'ink', 2, 4.0);
