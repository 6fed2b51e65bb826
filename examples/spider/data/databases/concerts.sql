CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL, age INTEGER NOT NULL);
CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, title TEXT NOT NULL, year INTEGER NOT NULL, venue TEXT NOT NULL);
CREATE TABLE performance (concert_id INTEGER NOT NULL REFERENCES concert(concert_id), singer_id INTEGER NOT NULL REFERENCES singer(singer_id));
INSERT INTO singer VALUES (1, 'Mara Quist', 'Norway', 34), (2, 'Leo Brandt', 'Germany', 41), (3, 'Ines Lobo', 'Portugal', 27), (4, 'Tom Avery', 'Ireland', 52), (5, 'Sofia Renn', 'Norway', 23), (6, 'Kai Mertens', 'Germany', 38);
INSERT INTO concert VALUES (1, 'Winter Lights', 2021, 'Harbor Hall'), (2, 'Spring Voices', 2022, 'Old Theatre'), (3, 'Summer Nights', 2022, 'Harbor Hall'), (4, 'Autumn Echoes', 2023, 'City Arena'), (5, 'New Year Gala', 2023, 'Old Theatre');
INSERT INTO performance VALUES (1, 1), (1, 2), (2, 3), (3, 1), (3, 4), (3, 5), (4, 2), (4, 6), (5, 3), (5, 5), (5, 1);
