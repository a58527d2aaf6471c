#!/usr/bin/python3
"""Writes three of scikit-learn's bundled data sets (Debian's python3-sklearn; nothing is
downloaded) as the files troupe's own-data sources read, each split 80/20 into a training
and a test part by a fixed permutation:

    digits/          8x8 images of handwritten digits, 10 classes, as .npy (uint8, 0..16)
    digits_png/      the same split as folders of 8x8 gray PNG images, a folder a digit
                     (torchvision's ImageFolder layout), pixels 0..16 scaled to 0..255
    breast_cancer/   30 measurements, benign or not, as CSV tables with a header row
    diabetes/        10 measurements, disease progression a year later, as CSV tables

    /usr/bin/python3 examples/own_data/make_data.py [DIR]     # DIR: examples/own_data/data

The configs next to this script (digits.toml, digits_png.toml, breast_cancer.toml,
diabetes.toml) train on them: `troupe run examples/own_data/digits.toml`.
"""
import csv
import os
import sys

import numpy as np
from PIL import Image
from sklearn import datasets


def split(count, seed=0):
    """The indices of a fixed 80/20 split of `count` samples."""
    order = np.random.RandomState(seed).permutation(count)
    cut = count * 4 // 5
    return order[:cut], order[cut:]


def write_csv(path, names, features, targets, target_name):
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(list(names) + [target_name])
        for row, target in zip(features, targets):
            writer.writerow([repr(float(v)) for v in row] + [repr(float(target))])


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "data")
    for part in ("digits", "breast_cancer", "diabetes"):
        os.makedirs(os.path.join(root, part), exist_ok=True)

    digits = datasets.load_digits()
    train, test = split(len(digits.target))
    pixels = digits.data.astype(np.uint8)  # 0..16
    for name, rows in (("train", train), ("test", test)):
        np.save(os.path.join(root, "digits", name + "_x.npy"), pixels[rows])
        np.save(os.path.join(root, "digits", name + "_y.npy"), digits.target[rows].astype(np.uint8))

    for name, rows in (("train", train), ("test", test)):
        for row in rows:
            folder = os.path.join(root, "digits_png", name, str(digits.target[row]))
            os.makedirs(folder, exist_ok=True)
            image = np.round(digits.images[row] * (255 / 16)).astype(np.uint8)
            Image.fromarray(image, mode="L").save(os.path.join(folder, "%04d.png" % row))

    cancer = datasets.load_breast_cancer()
    train, test = split(len(cancer.target))
    for name, rows in (("train", train), ("test", test)):
        write_csv(os.path.join(root, "breast_cancer", name + ".csv"), cancer.feature_names,
                  cancer.data[rows], cancer.target[rows], "benign")

    diabetes = datasets.load_diabetes(scaled=False)
    train, test = split(len(diabetes.target))
    for name, rows in (("train", train), ("test", test)):
        write_csv(os.path.join(root, "diabetes", name + ".csv"), diabetes.feature_names,
                  diabetes.data[rows], diabetes.target[rows], "progression")
    print("wrote digits (npy and png), breast_cancer and diabetes (csv) under " + root)


main()
