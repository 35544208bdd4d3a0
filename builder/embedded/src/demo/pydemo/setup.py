# pydemo: the Python half of epbuild's offline demo recipe.
from setuptools import setup

setup(name="pydemo", version="1.0.0", packages=["pydemo"])
