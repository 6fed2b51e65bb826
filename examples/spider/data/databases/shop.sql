CREATE TABLE product (product_id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price REAL NOT NULL);
CREATE TABLE customer (customer_id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
CREATE TABLE purchase (purchase_id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customer(customer_id), product_id INTEGER NOT NULL REFERENCES product(product_id), quantity INTEGER NOT NULL, purchase_date TEXT NOT NULL);
INSERT INTO product VALUES (1, 'Kettle', 'kitchen', 35.0), (2, 'Toaster', 'kitchen', 49.5), (3, 'Desk Lamp', 'office', 22.0), (4, 'Notebook', 'office', 4.5), (5, 'Blender', 'kitchen', 80.0), (6, 'Stapler', 'office', 9.0);
INSERT INTO customer VALUES (1, 'Alva', 'Lund'), (2, 'Bruno', 'Porto'), (3, 'Chen', 'Lund'), (4, 'Dara', 'Cork');
INSERT INTO purchase VALUES (1, 1, 1, 1, '2024-05-01'), (2, 1, 4, 10, '2024-05-02'), (3, 2, 5, 1, '2024-05-03'), (4, 3, 3, 2, '2024-05-03'), (5, 3, 4, 5, '2024-05-07'), (6, 4, 2, 1, '2024-05-09'), (7, 2, 6, 3, '2024-05-10'), (8, 1, 5, 1, '2024-05-12');
